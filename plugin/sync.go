package plugin

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/config"

	"github.com/sirupsen/logrus"
	"k8s.io/client-go/util/workqueue"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/admission"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/request"
)

// The controller's queue is client-go's rate-limited workqueue keyed by
// sandbox ID, as in client-go's controller example: entry points only record
// what they saw and add the key; a worker takes a key, reads the sandbox's
// record once (a snapshot), runs the one sync for it, commits the outcome
// once, says it once (report, metrics, one log line), and puts the key back
// rate-limited when the table of errors says a retry can help. The retry
// count is the queue's. The workqueue never gives one key to two workers
// at once, and a key added while its sync runs is synced again afterwards.

// newQueue returns the queue: each sandbox's retries wait as lim says
// (nil: RetryMin doubling up to RetryMax).
func newQueue(lim workqueue.TypedRateLimiter[string], retryMin, retryMax time.Duration, metrics workqueue.MetricsProvider) workqueue.TypedRateLimitingInterface[string] {
	if lim == nil {
		lim = workqueue.NewTypedItemExponentialFailureRateLimiter[string](retryMin, retryMax)
	}
	cfg := workqueue.TypedRateLimitingQueueConfig[string]{Name: "nri-hcn-portmap", MetricsProvider: metrics}
	if metrics == nil { // client-go's global provider (a no-op unless someone sets it) is not used
		cfg.MetricsProvider = noQueueMetrics{}
	}
	return workqueue.NewTypedRateLimitingQueueWithConfig(lim, cfg)
}

func (c *Core) startWorkers(n int) {
	for range n {
		c.workers.Go(func() {
			for {
				id, shutdown := c.q.Get()
				if shutdown {
					return
				}
				c.process(id)
				c.q.Done(id)
			}
		})
	}
}

// outcome is what one sync returns: what is known of the sandbox now (the
// worker commits it whole), what it did, and the error it failed with (not
// yet naming the pod: process names it once). What the pod's owners are
// told, the gauge, the log line and the retry all follow from the error's
// row in the table (errors.go) or, on success, from mapped.
type outcome struct {
	known  known
	change Change
	err    error
	pod    Pod     // the pod as the sync resolved it
	mapped *mapped // a pod whose host ports are in place: who maps them
	// unreadable: containerd's CRI record of the sandbox does not decode;
	// its hostPorts are not known (reported, never a failure of the pod)
	unreadable error
	skipped    []string // Observer.Skipped reasons
	line       line     // the sync's one log line when it succeeds
	also       []string // other sandboxes to sync: a host port's holder
}

// mapped is who maps a pod's host ports: the plugin's endpoint (with
// policies) and the CNI's.
type mapped struct {
	endpoint *hcn.Endpoint
	policies []hcn.PortMappingPolicy
	cni      []CNIMapping
}

// line is a log line: level, message, fields.
type line struct {
	level  logrus.Level
	msg    string
	fields logrus.Fields
}

func (o *outcome) fail(err error) outcome {
	o.err = err
	return *o
}

func (o *outcome) say(level logrus.Level, msg string, fields logrus.Fields) {
	o.line = line{level: level, msg: msg, fields: fields}
}

// process runs one sync of a sandbox: the snapshot, the sync, the commit,
// then the outcome said once, and the retry as the table of errors says.
func (c *Core) process(id string) {
	sn, ok := c.st.snapshot(id, c.q.NumRequeues(id)+1)
	if !ok {
		c.q.Forget(id) // a delayed retry of work already done
		return
	}
	// A sync is never cut short (an HNS call given up on would leave what
	// it creates late behind); each HNS call is bounded anyway.
	ctx, cancel := context.WithTimeout(context.Background(), config.SyncBound)
	out := c.sync(ctx, sn)
	cancel()
	v := judge(out.pod, out.err, sn.attempt) // the pod named once, the row read once
	out.err, out.known.err = v.err, v.err
	if out.pod.Name != "" {
		out.known.name, out.known.namespace = out.pod.holderName(), out.pod.Namespace
	}
	mapped := out.err == nil && !sn.known.timed && !sn.startedAt.IsZero() && len(out.known.eps) > 0
	out.known.timed = sn.known.timed || mapped
	v.again = v.again && !c.closing.Load()
	if !v.again {
		out.known.waitFor = nil // a conflict's wait ends with its work
	}
	tell := c.st.commit(id, sn, out.known, v.again)
	if mapped { // its host ports first in place
		c.opt.Observer.Mapped(sn.startPath, time.Since(sn.startedAt))
	}
	c.tell(sn, out, v, tell)
	for _, h := range out.also {
		c.enqueue(h, sighting{}) // a conflict asks: does the holder still run?
	}
	if v.again {
		c.q.AddRateLimited(id)
	} else {
		c.q.Forget(id)
	}
}

// tell says a sync's outcome once: the owners' report, the metrics, the
// waiters it answers and one log line, each as the error's row says.
func (c *Core) tell(sn snap, out outcome, v verdict, waiters []waiter) {
	if rep := ownersReport(sn, out, v.kind.reason); rep != nil {
		c.opt.Reporter.Report(*rep)
	}
	for _, r := range out.skipped {
		c.opt.Observer.Skipped(r)
	}
	k, again := v.kind, v.again
	for _, w := range waiters {
		if w.kind != "" && k.counted {
			c.opt.Observer.Operation(w.kind, k.class)
		}
		if w.ch != nil {
			w.ch <- result{out.change, out.err}
		}
	}
	log := c.PodLog(out.pod)
	switch {
	case out.err == nil && out.line.msg != "":
		log.WithFields(out.line.fields).Log(out.line.level, out.line.msg)
	case out.err == nil:
	case again:
		level := logrus.WarnLevel
		if k.quietRetry {
			level = logrus.DebugLevel
		}
		log.WithField("attempt", sn.attempt).WithError(out.err).Log(level, "sync failed; retrying")
	case k.retry == retryBounded:
		log.WithField("attempts", sn.attempt).WithError(out.err).Log(k.level, k.says)
	default:
		log.WithFields(out.line.fields).WithError(out.err).Log(k.level, k.says)
	}
}

// pastDeadline is the answer to a runtime whose RunPodSandbox waited the
// whole deadline (HCN slower than that): fail-open lets the pod proceed,
// its endpoint completed in the background (retrying what passes, until
// it exists or the pod is gone); fail-closed fails the pod with
// ErrDeadline, naming what held it up, and records a stop, whose sync
// removes whatever the start made.
func (c *Core) pastDeadline(p Pod) error {
	log := c.PodLog(p).WithField("deadline", c.opt.Deadline.String())
	last := c.st.lastErr(p.ID) // what held it up, when a sync has said
	if last != nil {
		log = log.WithError(last)
	}
	if c.opt.FailOpen {
		log.Warn("host ports not in place within the deadline: the pod proceeds, its endpoint is completed in the background (fail-open)")
		return nil
	}
	c.enqueue(p.ID, sighting{stop: true}) // the runtime is told the pod failed: leave nothing behind
	log.Warn("host ports not in place within the deadline: the pod fails, its endpoint is rolled back (fail-closed)")
	if last != nil {
		return fmt.Errorf("pod %s: %w (%s, failure_policy fail-closed); what was started is rolled back; the last attempt: %w",
			p, ErrDeadline, c.opt.Deadline, last)
	}
	return fmt.Errorf("pod %s: %w (%s, failure_policy fail-closed); what was started is rolled back", p, ErrDeadline, c.opt.Deadline)
}

// sync is the controller's one decision: for every trigger alike (an NRI
// request, a containerd event, Synchronize, a resync, a retry) it reads
// what should be (the snapshot's triggers, containerd's record and task
// state, the pod's request) and what is (the sandbox's endpoints, as known
// or as HNS says), converges, and returns the outcome. Its I/O goes through
// containerd's record (SandboxStore) and hcn.Manager; of the state it reads
// the snapshot alone and writes one thing, its claim of host ports (the
// commit is the worker's). The steps, in order:
//
//  0. a listing of HNS: what it showed is what a sandbox known to nobody
//     holds; a disagreement with what is known means HNS is asked. A
//     listing alone (start-up) asks for nothing more;
//  1. a stopped or removed sandbox loses its endpoint and its host ports;
//  2. a request the trigger gave whole, with the annotation as its only
//     source, is decided without I/O: a bad one fails, none costs nothing;
//  3. containerd's record: gone means nothing is left, an application
//     container is not ours;
//  4. live? a start seen says so; otherwise containerd's task and HCN's
//     namespace tell; a sandbox that no longer runs is stopped (1);
//  5. the request: the mappings from its sources, limits; every mapping
//     the endpoint in place does not hold yet is admitted (the node's
//     rules, the annotation's Pod Security) as a new pod's would be (a
//     record that does not decode leaves its hostPorts unknown, reported);
//  6. nothing asked for, no Windows namespace, Hyper-V isolation, or all
//     of it mapped by the CNI already (asked only of a pod with hostPorts,
//     the only mappings a CNI is given): no endpoint of ours;
//  7. the claim: the host ports reserved in one step with the check that
//     no other pod holds or claims them; a pod holding one makes this sync
//     wait for that pod's own sync, once, which tells whether it still runs;
//  8. the endpoint: kept, replaced, created and attached (hcn.Manager).
func (c *Core) sync(ctx context.Context, sn snap) outcome {
	o, w := c.decide(ctx, sn)
	if w == nil {
		return o
	}
	return c.converge(ctx, sn, o, *w, c.st.claim(sn.id, o.pod.holderName(), w.policies)) // 7, 8
}

// want is the endpoint a sync decided the sandbox should have.
type want struct {
	netns    hcn.GUID
	policies []hcn.PortMappingPolicy
	cni      []CNIMapping
	dns      hcn.DNS
}

// decide is steps 0 to 6: the outcome when the sandbox needs no endpoint
// of ours (or cannot have one), else the endpoint it wants.
func (c *Core) decide(ctx context.Context, sn snap) (outcome, *want) {
	o := outcome{known: sn.known, pod: sn.pod}
	if o.pod.ID == "" {
		o.pod = Pod{ID: sn.id, Partial: true}
	}
	p := o.pod
	if sn.listing { // 0
		switch {
		case !sn.known.committed: // nothing known of its own: the listing is what it holds
			o.known.eps, o.known.epsKnown = sn.listed, true
			for _, ep := range sn.listed {
				o.known.ports = append(o.known.ports, ep.PortMappings...)
				o.known.sandbox = true // an endpoint of ours: it was a sandbox
			}
		case !sn.known.epsKnown || !sameEndpoints(sn.listed, sn.known.eps):
			o.known.eps, o.known.epsKnown = nil, false // HNS says otherwise: ask it
		}
	}
	if !sn.act {
		return o, nil
	}
	if sn.stopped || sn.removed { // 1
		return c.syncStopped(ctx, sn, o), nil
	}
	var annotated []request.PortMapping // 2
	decided := !p.Partial && !c.opt.Inputs.CRI
	if decided {
		ms, err := c.mappings(p)
		if err != nil {
			return o.fail(err), nil
		}
		if len(ms) == 0 && o.known.epsKnown && len(o.known.eps) == 0 {
			return o, nil
		}
		annotated = ms
	}
	sb, err := c.store.Sandbox(ctx, sn.id) // 3
	switch {
	case errors.Is(err, ErrSandboxNotFound):
		if terr := c.teardown(ctx, &o); terr != nil {
			return o.fail(terr), nil
		}
		o.known.gone, o.known.cni = true, nil
		return o.fail(err), nil
	case err != nil:
		return o.fail(fmt.Errorf("reading the sandbox from containerd: %w", err)), nil
	case !sb.IsSandbox:
		return o.fail(ErrNotSandbox), nil
	}
	o.known.sandbox = true
	state, err := c.live(ctx, sb, sn.started) // 4
	if err != nil {
		return o.fail(fmt.Errorf("deciding whether the sandbox is live: %w", err)), nil
	}
	switch state {
	case stoppedForGood: // containerd says so: CRI never starts a sandbox again
		o.known.final, o.known.cni = true, nil
		return o.fail(c.teardown(ctx, &o)), nil
	case notRunning: // HCN says so (no namespace): judged again next time
		o.known.cni = nil
		return o.fail(c.teardown(ctx, &o)), nil
	}
	req, err := c.request(p, sb, annotated, decided, o.known.ports) // 5
	o.pod, o.unreadable = req.pod, req.unreadable
	p = req.pod
	if err != nil {
		return o.fail(err), nil
	}
	if req.unreadable != nil {
		o.skipped = append(o.skipped, SkipCRIRecordUnreadable)
	}
	switch { // 6
	case !req.known:
		if req.unreadable != nil {
			o.say(logrus.WarnLevel, "containerd's record of the sandbox does not decode: its request is not known",
				logrus.Fields{"error": req.unreadable.Error()})
		}
		return o, nil // live, but its request is unknown here
	case len(req.mappings) == 0:
		return o.fail(c.teardown(ctx, &o)), nil
	case sb.NetNS == "":
		if sn.started {
			o.say(logrus.InfoLevel, "sandbox has no Windows network namespace (Linux or HostProcess sandbox); skipped", nil)
			o.skipped = append(o.skipped, SkipNoNetNS)
		}
		return o.fail(c.teardown(ctx, &o)), nil
	}
	if why := c.hyperV(p, sb); why != "" {
		if err := c.teardown(ctx, &o); err != nil {
			return o.fail(err), nil
		}
		o.line.fields = logrus.Fields{"isolation": why}
		return o.fail(fmt.Errorf("%w (%s): its utility VM takes the namespace's endpoints only when it starts, "+
			"so an endpoint added now would never reach it; map host ports of Hyper-V pods with the CNI's portMappings", ErrHyperV, why)), nil
	}
	w := want{netns: sb.NetNS, policies: request.BuildPolicies(req.mappings, c.opt.Policy), dns: req.dns}
	// The other endpoints of the pod's namespace (the CNI's), asked of HNS
	// once, and only where they matter: for hostPorts, which the CNI may
	// map itself, and for a pod whose record has no DNS, which gets the
	// CNI endpoint's DNS on ours instead of HNS's fill-in of the node's.
	var others []hcn.Endpoint
	if req.hostPorts || req.noDNS {
		if others, err = c.mgr.Neighbours(ctx, sb.NetNS, sn.id); err != nil {
			return o.fail(err), nil
		}
	}
	if req.noDNS {
		w.dns = hcn.NeighbourDNS(others)
	}
	if req.hostPorts {
		// the CNI may map the pod's hostPorts itself (it is given them as
		// portMappings; win-bridge honours them): HNS would refuse the same
		// mapping twice. A pod without hostPorts gives the CNI nothing to
		// map, and HNS is not asked.
		if w.policies, w.cni, err = c.notProvided(ctx, others, w.policies); err != nil {
			return o.fail(err), nil
		}
		if len(w.policies) == 0 { // the CNI maps them all
			if err := c.teardown(ctx, &o); err != nil {
				return o.fail(err), nil
			}
			if !slices.Equal(o.known.cni, w.cni) {
				o.countCNI(w.cni)
				o.say(logrus.InfoLevel, "host ports all mapped by the CNI's endpoint in the pod's namespace", logrus.Fields{"cni": fmt.Sprint(w.cni)})
			}
			o.known.cni = w.cni
			o.mapped = &mapped{cni: w.cni}
			return o, nil
		}
	}
	return o, &w
}

// holderDecided says whether a conflict is decided: the holder's own sync
// has confirmed it live since this sandbox first waited for it (the claim
// says how often it had been confirmed). If not, the wait is recorded in
// o (its first sighting of the holder).
func holderDecided(sn snap, o *outcome, ce *ConflictError) bool {
	prev := sn.known.waitFor
	if prev != nil && prev.holder == ce.HolderID {
		return ce.confirmed > prev.seen
	}
	o.known.waitFor = &holderWait{holder: ce.HolderID, seen: ce.confirmed}
	return false
}

// converge is steps 7 and 8: with the claim's answer (nil: the host ports
// are this sandbox's until its commit), make HNS hold the endpoint w asks
// for.
func (c *Core) converge(ctx context.Context, sn snap, o outcome, w want, conflict *ConflictError) outcome {
	if conflict != nil { // 7
		if !holderDecided(sn, &o, conflict) {
			// does the holder still run? Its own sync says: a gone or
			// stopping holder gives the ports back, a live one is confirmed
			o.also = append(o.also, conflict.HolderID)
			return o.fail(fmt.Errorf("%w: %w", errHolderPending, conflict))
		}
		c.describeHolder(ctx, conflict)
		return o.fail(conflict)
	}
	existing := o.known.eps
	if !o.known.epsKnown {
		var err error
		if existing, err = c.mgr.Lookup(ctx, sn.id); err != nil {
			return o.fail(err)
		}
	}
	ep, built, err := c.mgr.Converge(ctx, hcn.Desired{SandboxID: sn.id, Namespace: w.netns, Policies: w.policies, DNS: w.dns}, existing)
	if err != nil {
		o.known.eps, o.known.epsKnown = nil, false // what HNS holds now is not known; its ports stay held
		if errors.Is(err, hcn.ErrPortInUse) {      // HNS holds the port, though the claim said no pod of ours does
			err = fmt.Errorf("%w; no pod this plugin manages held it when this one asked: another process, a CNI's endpoint "+
				"in another pod's namespace, or a port HNS kept after a delete (kubernetes#137530) holds it; see Get-HnsEndpoint "+
				"(or hnsdiag list endpoints) and netstat -ano", err)
		}
		return o.fail(err)
	}
	o.known.eps, o.known.epsKnown, o.known.ports = []hcn.Endpoint{*ep}, true, slices.Clone(w.policies)
	// an endpoint kept with DNS other than the pod's (an earlier
	// release's, or HNS's fill-in): reported, fixed at its next sandbox
	o.known.foreignDNS = !ep.DNS.Carries(w.dns)
	o.known.confirmed++
	o.known.waitFor = nil
	cniChanged := !slices.Equal(o.known.cni, w.cni)
	if cniChanged {
		o.countCNI(w.cni)
	}
	o.known.cni = w.cni
	o.mapped = &mapped{endpoint: ep, policies: w.policies, cni: w.cni}
	// who maps each of the pod's host ports, said once: ours, the CNI's
	fields := logrus.Fields{"endpoint": ep.ID, "netns": w.netns, "mappings": policyList(w.policies)}
	if len(w.cni) > 0 {
		fields["cni"] = fmt.Sprint(w.cni)
	}
	if built == hcn.Unchanged {
		o.change = Kept
		if cniChanged {
			o.say(logrus.InfoLevel, "endpoint in place; what the CNI maps changed", fields)
		} else {
			o.say(logrus.DebugLevel, "endpoint already in place", fields)
		}
		return o
	}
	fields["outcome"] = built.String()
	o.change = Built
	o.say(logrus.InfoLevel, "endpoint attached", fields)
	return o
}

// syncStopped removes what a stopped sandbox still has, and forgets the
// sandbox once containerd no longer has it either.
func (c *Core) syncStopped(ctx context.Context, sn snap, o outcome) outcome {
	if err := c.teardown(ctx, &o); err != nil {
		return o.fail(err)
	}
	o.known.cni = nil
	removed, sandbox := sn.removed, sn.sandbox
	// A listing of containerd lacked it, or a start came after the stop of
	// a container never seen as a sandbox: containerd is asked (the one
	// lookup of a stop, and only then).
	if (sn.verify || (sn.started && !sandbox)) && !removed {
		sb, err := c.store.Sandbox(ctx, sn.id)
		switch {
		case errors.Is(err, ErrSandboxNotFound):
			removed = true
		case err == nil && sb.IsSandbox:
			o.known.sandbox, sandbox = true, true
		}
	}
	o.known.gone = o.known.gone || removed
	if o.change == NoChange && !sandbox {
		return o.fail(ErrNotSandbox) // nothing of ours, maybe an application container
	}
	return o
}

// teardown removes the sandbox's endpoints and gives its host ports back.
func (c *Core) teardown(ctx context.Context, o *outcome) error {
	eps := o.known.eps
	if !o.known.epsKnown {
		var err error
		if eps, err = c.mgr.Lookup(ctx, o.pod.ID); err != nil {
			return err
		}
	}
	n, err := c.mgr.Delete(ctx, eps)
	if err != nil {
		o.known.eps, o.known.epsKnown = nil, false // its ports stay held: some may be left
		return err
	}
	o.known.eps, o.known.epsKnown, o.known.ports = nil, true, nil
	if n > 0 {
		o.change = Removed
		o.say(logrus.InfoLevel, "endpoint removed", logrus.Fields{"endpoints": n})
	}
	return nil
}

// liveness is what the sync concludes of a sandbox's life.
type liveness int

const (
	running        liveness = iota
	notRunning              // its namespace is gone: nothing to attach to (asked again next time)
	stoppedForGood          // containerd says its task stopped
)

// live says whether a sandbox runs: a start seen since the last sync says
// so; otherwise containerd's task (stopped: for good) and HCN's namespace
// (it must still exist) tell. A sandbox without a Windows namespace runs
// for containerd alone.
func (c *Core) live(ctx context.Context, sb *SandboxInfo, started bool) (liveness, error) {
	if started {
		return running, nil
	}
	state, err := c.store.TaskState(ctx, sb.ID)
	if err != nil {
		return notRunning, err
	}
	switch {
	case state == TaskStopped:
		return stoppedForGood, nil
	case sb.NetNS == "" && state == TaskRunning:
		return running, nil
	case sb.NetNS == "":
		return notRunning, nil
	}
	exists, err := c.mgr.NamespaceExists(ctx, sb.NetNS)
	if err != nil || !exists {
		return notRunning, err
	}
	return running, nil
}

// notProvided splits the pod's policies into those no other endpoint of
// its namespace maps (ours to make) and those another one, the CNI's,
// maps already (HNS takes a host port once), each with whether it will
// work on the CNI's network.
func (c *Core) notProvided(ctx context.Context, others []hcn.Endpoint, policies []hcn.PortMappingPolicy) ([]hcn.PortMappingPolicy, []CNIMapping, error) {
	if len(others) == 0 {
		return policies, nil, nil
	}
	var ours []hcn.PortMappingPolicy
	var cni []CNIMapping
	for _, p := range policies {
		pv := hcn.ProvidedBy(p, others)
		if pv == nil {
			ours = append(ours, p)
			continue
		}
		netType, err := c.mgr.NetworkType(ctx, pv.Endpoint.NetworkID)
		if err != nil {
			return nil, nil, err
		}
		works, why, fix := pv.Effective(netType)
		cni = append(cni, CNIMapping{Policy: p, Endpoint: pv.Endpoint.ID, Name: pv.Endpoint.Name, V1NAT: pv.V1NAT,
			Works: works, Why: why, Fix: fix})
	}
	return ours, cni, nil
}

// countCNI counts the host ports the CNI maps (once per change).
func (o *outcome) countCNI(cni []CNIMapping) {
	for _, m := range cni {
		if m.Works {
			o.skipped = append(o.skipped, SkipMappedByCNI)
		} else {
			o.skipped = append(o.skipped, SkipCNIIneffective)
		}
	}
}

// ErrHyperV: the pod is Hyper-V isolated; host ports cannot be added to it.
// It is an invalid request (final).
var ErrHyperV = fmt.Errorf("%w: Hyper-V isolated pod", ErrInvalidPod)

// hyperV says why the sandbox is Hyper-V isolated, "" when it is not.
func (c *Core) hyperV(p Pod, sb *SandboxInfo) string {
	if sb.HyperV != "" {
		return sb.HyperV
	}
	if h := p.RuntimeHandler; h != "" && slices.Contains(c.opt.HyperVHandlers, h) {
		return "runtime handler " + h
	}
	return ""
}

// describeHolder fills in the holder's pod name from containerd's record
// when the state knew its sandbox ID alone (a holder adopted from a
// listing of HNS, not synced since).
func (c *Core) describeHolder(ctx context.Context, ce *ConflictError) {
	if ce.Holder != "" {
		return
	}
	sb, err := c.store.Sandbox(ctx, ce.HolderID)
	if err != nil || len(sb.Metadata) == 0 {
		return
	}
	if meta, err := request.DecodeCRIMetadata(sb.Metadata); err == nil && meta.PodName != "" {
		ce.Holder = meta.PodNamespace + "/" + meta.PodName
	}
}

func policyList(ps []hcn.PortMappingPolicy) string { return fmt.Sprint(ps) }

// mappings returns the port mappings the pod's annotation asks for; an
// invalid request (or one over the limits) is an error naming the pod, the
// annotation and the entry (or the count and the limit), wrapping
// ErrInvalidPod.
func (c *Core) mappings(p Pod) ([]request.PortMapping, error) {
	v, ok := p.Annotations[request.AnnotationPortMappings]
	if !ok {
		return nil, nil
	}
	ms, err := request.ParsePortMappings(v, c.opt.Limits)
	if err != nil {
		return nil, fmt.Errorf("annotation %s: %w: %w", request.AnnotationPortMappings, ErrInvalidPod, err)
	}
	return ms, nil
}

// podRequest is what a sandbox asks for.
type podRequest struct {
	pod      Pod // completed from containerd's CRI record when partial
	known    bool
	mappings []request.PortMapping
	// hostPorts: the pod's CRI record has Kubernetes hostPorts, the only
	// mappings a CNI is given (portMappings) and so can map itself
	hostPorts bool
	// unreadable: the CRI record does not decode; its hostPorts (and, for
	// a partial pod, everything) are unknown
	unreadable error
	// dns is the pod's own DNS, from its CRI record (zero: not known)
	dns hcn.DNS
	// noDNS: the pod's CRI record has no DNS (no resolvers): its
	// interface's DNS is the CNI endpoint's
	noDNS bool
}

// request works out what the sandbox asks for from the pod the trigger
// gave and containerd's record: a partial pod is completed from the CRI
// metadata, and the mappings come from the enabled sources (annotated:
// the annotation's, parsed already when parsed is set), merged, and every
// one the sandbox does not hold yet (held: its host ports in place) is
// admitted by the node's policy, and the annotation's also by its
// namespace's Pod Security level, as a new pod's would be: a policy or a
// label that changed since never takes a mapping in place away, nor lets
// a new one through unchecked. known is false for a partial pod whose
// record has no CRI metadata, or none that decodes. The record is the
// runtime's, not the pod author's: one that does not decode never fails
// the pod (unreadable says so), the annotation is still mapped.
func (c *Core) request(p Pod, sb *SandboxInfo, annotated []request.PortMapping, parsed bool, held []hcn.PortMappingPolicy) (podRequest, error) {
	r := podRequest{pod: p, known: !p.Partial}
	var meta *request.CRIMetadata
	if len(sb.Metadata) > 0 {
		var err error
		switch meta, err = request.DecodeCRIMetadata(sb.Metadata); {
		case err != nil && (p.Partial || c.opt.Inputs.CRI): // what the pod asks for is not (all) known
			r.unreadable = fmt.Errorf("sandbox %s: %w", p.ID, err)
		case err != nil: // the pod's DNS alone is not known
		case p.Partial:
			r.pod = Pod{ID: p.ID, Name: meta.PodName, Namespace: meta.PodNamespace, UID: meta.PodUID,
				Annotations: meta.Annotations, Labels: meta.Labels, RuntimeHandler: meta.RuntimeHandler}
			r.known = true
		}
		if meta != nil {
			r.dns, r.noDNS = meta.DNS, len(meta.DNS.ServerList) == 0
		}
	}
	if !r.known {
		return r, nil
	}
	if c.opt.Inputs.Annotations && !parsed {
		var err error
		if annotated, err = c.mappings(r.pod); err != nil {
			return r, err
		}
	}
	r.mappings = annotated
	if c.opt.Inputs.CRI && meta != nil {
		cri, err := meta.HostPorts(c.opt.Limits)
		if err == nil {
			r.hostPorts = len(cri) > 0
			r.mappings, err = request.MergeMappings(annotated, cri, c.opt.Limits)
		}
		if err != nil {
			return r, fmt.Errorf("%w: %w", ErrInvalidPod, err)
		}
	}
	if pol := c.policy.Load(); pol != nil {
		newAll, newAnnotated := request.Unheld(r.mappings, annotated, c.opt.Policy, held)
		// hostPorts passed Pod Security at the API server; the annotation
		// is held to it here
		if err := pol.AdmitRequest(admission.Pod{Namespace: r.pod.Namespace, Labels: r.pod.Labels}, newAll, newAnnotated, c.opt.Namespaces); err != nil {
			return r, err
		}
	}
	return r, nil
}
