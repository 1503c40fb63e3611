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
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/backoff"
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
// (nil: the one retry rule, backoff.QueueLimiter from RetryMin to
// RetryMax).
func newQueue(lim workqueue.TypedRateLimiter[string], retryMin, retryMax time.Duration, metrics workqueue.MetricsProvider) workqueue.TypedRateLimitingInterface[string] {
	if lim == nil {
		lim = backoff.QueueLimiter(retryMin, retryMax)
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
		out.known.name, out.known.namespace = out.pod.HolderName(), out.pod.Namespace
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

// sync is the controller's one piece of work for a sandbox, for every
// trigger alike (an NRI request, a containerd event, Synchronize, a
// resync, a retry): decide (decide.go), a function of the snapshot, the
// facts read for it and the inputs as the sync began, says which fact it
// needs next (read here: containerd's record and task, HCN's namespace and
// its other endpoints, their networks' types) and, once it has them, what
// to do; apply does it. Its I/O goes through containerd's record
// (SandboxStore) and hcn.Manager alone; of the state it reads the snapshot
// and writes one thing, its claim of host ports (the commit is the
// worker's).
func (c *Core) sync(ctx context.Context, sn snap) outcome {
	in := c.inputs()
	var f facts
	for {
		p := decide(sn, f, in)
		if p.ask == decided {
			return c.apply(ctx, sn, p)
		}
		c.read(ctx, sn, p, &f)
	}
}

// inputs are the values this sync decides with: the admission policy and
// the namespaces' labels as of now, and the options.
func (c *Core) inputs() inputs {
	in := inputs{policy: c.policy.Load(), sources: c.opt.Inputs, limits: c.opt.Limits, policyOptions: c.opt.Policy,
		hyperVHandlers: c.opt.HyperVHandlers}
	if c.opt.Namespaces != nil {
		in.labels = c.opt.Namespaces.View()
	}
	return in
}

// read reads the fact p asks for into f.
func (c *Core) read(ctx context.Context, sn snap, p plan, f *facts) {
	switch p.ask {
	case askRecord:
		f.record, f.recordErr = c.store.Sandbox(ctx, sn.id)
		f.recordRead = true
	case askTask:
		f.task, f.taskErr = c.store.TaskState(ctx, sn.id)
		f.taskRead = true
	case askNamespace:
		f.nsExists, f.nsErr = c.mgr.NamespaceExists(ctx, f.record.NetNS)
		f.nsRead = true
	case askNeighbours:
		f.neighbours, f.neighboursErr = c.mgr.Neighbours(ctx, f.record.NetNS, sn.id)
		f.neighboursRead = true
	case askNetworkTypes:
		if f.netTypes == nil {
			f.netTypes = map[string]hcn.NetworkType{}
		}
		for _, id := range p.networks {
			t, err := c.mgr.NetworkType(ctx, id)
			if err != nil {
				f.netTypesErr = err
				break
			}
			f.netTypes[hcn.CanonicalGUID(id)] = t
		}
		f.netTypesRead = true
	}
}

// apply takes p's steps, each only when the one before succeeded: the
// removal of the sandbox's endpoints, then the claim of the host ports it
// wants and its endpoint (7, 8). It returns the outcome: p's, with what
// the steps did, failed with the first step's error, else with p's.
func (c *Core) apply(ctx context.Context, sn snap, p plan) outcome {
	o := p.out
	if p.remove {
		if err := c.teardown(ctx, &o); err != nil {
			return o.fail(err)
		}
		o.known.gone = o.known.gone || p.removed.gone
		if p.removed.forgetCNI {
			o.known.cni = nil
		}
		if p.notOurs && o.change == NoChange {
			return o.fail(ErrNotSandbox) // nothing of ours, maybe an application container
		}
	}
	if p.err != nil {
		return o.fail(p.err)
	}
	if p.want != nil {
		return c.converge(ctx, sn, o, *p.want, c.st.claim(sn.id, o.pod.HolderName(), p.want.policies))
	}
	return o
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
