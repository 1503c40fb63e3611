package plugin

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/admission"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/request"
)

// sync is the controller's one piece of work for a sandbox, for every
// trigger alike (an NRI request, a containerd event, Synchronize, a
// resync, a retry): decide, a function of the snapshot, the
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
	if l := c.labels.Load(); l != nil {
		v := *l
		v.At = time.Now()
		in.labels = v
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
		var ours []string // known ours: not opened
		for _, ep := range sn.known.eps {
			ours = append(ours, ep.ID)
		}
		f.neighbours, f.neighboursErr = c.mgr.Neighbours(ctx, f.record.NetNS, sn.id, ours...)
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
		if !hcn.Permanent(err) {
			// HNS may have made what it was asked (a create given up on
			// finishes late, an attach fails after the create): the ports
			// asked stay held until a sync of this sandbox asks HNS (as
			// unsure: a sync admits them again, whatever the policy is then)
			o.known.unsure = withPorts(o.known.unsure, w.policies)
		}
		if errors.Is(err, hcn.ErrPortInUse) { // HNS holds the port, though the claim said no pod of ours does
			err = fmt.Errorf("%w; no pod this plugin manages held it when this one asked: another process, a CNI's endpoint "+
				"in another pod's namespace, or a port HNS kept after a delete (kubernetes#137530) holds it; see Get-HnsEndpoint "+
				"(or hnsdiag list endpoints) and netstat -ano", err)
		}
		return o.fail(err)
	}
	o.known.eps, o.known.epsKnown, o.known.ports, o.known.unsure = []hcn.Endpoint{*ep}, true, slices.Clone(w.policies), nil
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

// withPorts is held with the policies of asked it does not hold yet.
func withPorts(held, asked []hcn.PortMappingPolicy) []hcn.PortMappingPolicy {
	out := slices.Clone(held)
	for _, p := range asked {
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out
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
	o.known.eps, o.known.epsKnown, o.known.ports, o.known.unsure = nil, true, nil, nil
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

// decide is the controller's one decision, a function of values: the
// sandbox's snapshot, the facts the sync has read for it, and the inputs
// as the sync began. It reads nothing else and changes nothing. Its plan
// either asks for one more fact (the sync reads it and decides again) or
// says what to do: remove the sandbox's endpoints, or claim its host ports
// and make HNS hold the endpoint it wants; and what the outcome is once
// those steps are done. The steps, in order:
//
//  0. a listing of HNS: what it showed is what a sandbox known to nobody
//     holds; a disagreement with what is known means HNS is asked. A
//     listing alone (start-up) asks for nothing more;
//  1. a stopped or removed sandbox loses its endpoint and its host ports;
//  2. a request the trigger gave whole, with the annotation as its only
//     source, is decided without a read: a bad one fails, none costs
//     nothing;
//  3. containerd's record: gone means nothing is left, an application
//     container is not ours;
//  4. the request (request.Resolve): the mappings from its sources,
//     limits; every mapping the endpoint in place does not hold yet is
//     admitted (the node's rules, the annotation's Pod Security) as a new
//     pod's would be; a pod that asks nothing needs no more reads;
//  5. live? a start seen says so; otherwise containerd's task and HCN's
//     namespace tell; a sandbox that no longer runs loses its endpoint;
//  6. nothing asked for, no Windows namespace, Hyper-V isolation, or all
//     of it mapped by the CNI already (asked only of a pod with hostPorts,
//     the only mappings a CNI is given): no endpoint of ours;
//  7. the endpoint it wants, with the pod's DNS (the CNI's endpoint's
//     where the pod's record has none).
func decide(sn snap, f facts, in inputs) plan {
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
		return plan{out: o}
	}
	if sn.stopped || sn.removed { // 1
		return decideStopped(sn, f, o)
	}
	if !p.Partial && !in.sources.CRI && !f.recordRead { // 2
		r, err := request.Resolve(request.Ask{Pod: p, Sources: in.sources, Limits: in.limits})
		if err != nil {
			return o.refuse(err)
		}
		if len(r.Mappings) == 0 && o.known.epsKnown && len(o.known.eps) == 0 {
			return plan{out: o}
		}
	}
	if !f.recordRead { // 3
		return plan{ask: askRecord}
	}
	sb := f.record
	switch {
	case errors.Is(f.recordErr, ErrSandboxNotFound):
		return plan{out: o, remove: true, removed: afterRemoval{gone: true, forgetCNI: true}, err: f.recordErr}
	case f.recordErr != nil:
		return o.refuse(fmt.Errorf("reading the sandbox from containerd: %w", f.recordErr))
	case !sb.IsSandbox:
		return o.refuse(ErrNotSandbox)
	}
	o.known.sandbox = true
	// the request first (a function of values): a pod that asks nothing
	// needs no more reads, whether it runs or not
	r, err := request.Resolve(request.Ask{Pod: p, Metadata: sb.Metadata, Sources: in.sources, Limits: in.limits, Policy: in.policyOptions,
		Held: o.known.ports, Admit: in.admit()})
	if err == nil && r.Known && r.Unreadable == nil && len(r.Mappings) == 0 {
		o.pod = r.Pod
		return plan{out: o, remove: true}
	}
	switch state, ask, lerr := live(sb, sn.started, f); { // 5
	case ask != decided:
		return plan{ask: ask}
	case lerr != nil:
		return o.refuse(fmt.Errorf("deciding whether the sandbox is live: %w", lerr))
	case state == stoppedForGood: // containerd says so: CRI never starts a sandbox again
		o.known.final, o.known.cni = true, nil
		return plan{out: o, remove: true}
	case state == notRunning: // HCN says so (no namespace): judged again next time
		o.known.cni = nil
		return plan{out: o, remove: true}
	}
	// the request, resolved above
	o.pod, o.unreadable = r.Pod, r.Unreadable
	p = r.Pod
	if err != nil {
		return o.refuse(err)
	}
	if r.Unreadable != nil {
		o.skipped = append(o.skipped, SkipCRIRecordUnreadable)
	}
	switch { // 6
	case !r.Known:
		if r.Unreadable != nil {
			o.say(logrus.WarnLevel, "containerd's record of the sandbox does not decode: its request is not known",
				logrus.Fields{"error": r.Unreadable.Error()})
		}
		return plan{out: o} // live, but its request is unknown here
	case len(r.Mappings) == 0:
		return plan{out: o, remove: true}
	case sb.NetNS == "":
		if sn.started {
			o.say(logrus.InfoLevel, "sandbox has no Windows network namespace (Linux or HostProcess sandbox); skipped", nil)
			o.skipped = append(o.skipped, SkipNoNetNS)
		}
		return plan{out: o, remove: true}
	}
	if why := in.hyperV(p, sb); why != "" {
		o.line.fields = logrus.Fields{"isolation": why}
		return plan{out: o, remove: true, err: fmt.Errorf("%w (%s): its utility VM takes the namespace's endpoints only when it starts, "+
			"so an endpoint added now would never reach it; map host ports of Hyper-V pods with the CNI's portMappings", ErrHyperV, why)}
	}
	w := want{netns: sb.NetNS, policies: r.Policies, dns: r.DNS} // 7
	// The other endpoints of the pod's namespace (the CNI's), asked of
	// HNS once, and only where they matter: for hostPorts, which the CNI
	// may map itself, and for a pod whose record has no DNS, which gets
	// the CNI endpoint's DNS on ours instead of HNS's fill-in of the
	// node's. The pod's own DNS, where its record has it, is never
	// replaced by the CNI's.
	if !r.HostPorts && !r.NoDNS {
		return plan{out: o, want: &w}
	}
	if !f.neighboursRead {
		return plan{ask: askNeighbours}
	}
	if f.neighboursErr != nil {
		return o.refuse(f.neighboursErr)
	}
	if r.NoDNS {
		w.dns = hcn.NeighbourDNS(f.neighbours)
	}
	if !r.HostPorts {
		return plan{out: o, want: &w}
	}
	// the CNI may map the pod's hostPorts itself (it is given them as
	// portMappings; win-bridge honours them): HNS would refuse the same
	// mapping twice. A pod without hostPorts gives the CNI nothing to map.
	if f.netTypesErr != nil {
		return o.refuse(f.netTypesErr)
	}
	ours, cni, unknown := notProvided(f.neighbours, w.policies, f.netTypes, f.netTypesRead)
	if len(unknown) > 0 {
		return plan{ask: askNetworkTypes, networks: unknown}
	}
	w.policies, w.cni = ours, cni
	if len(w.policies) > 0 {
		return plan{out: o, want: &w}
	}
	// the CNI maps them all: an endpoint of ours would hold host ports
	// nobody asks for
	if !slices.Equal(o.known.cni, w.cni) {
		o.countCNI(w.cni)
		o.say(logrus.InfoLevel, "host ports all mapped by the CNI's endpoint in the pod's namespace", logrus.Fields{"cni": fmt.Sprint(w.cni)})
	}
	o.known.cni = w.cni
	o.mapped = &mapped{cni: w.cni}
	return plan{out: o, remove: true}
}

// decideStopped plans the removal of what a stopped sandbox still has;
// the sandbox is forgotten once containerd no longer has it either. A
// listing of containerd that lacked it, or a start after the stop of a
// container never seen as a sandbox, asks containerd (the one read of a
// stop, and only then).
func decideStopped(sn snap, f facts, o outcome) plan {
	removed, sandbox := sn.removed, sn.sandbox
	if (sn.verify || (sn.started && !sandbox)) && !removed {
		if !f.recordRead {
			return plan{ask: askRecord}
		}
		switch {
		case errors.Is(f.recordErr, ErrSandboxNotFound):
			removed = true
		case f.recordErr == nil && f.record.IsSandbox:
			o.known.sandbox, sandbox = true, true
		}
	}
	return plan{out: o, remove: true, removed: afterRemoval{gone: removed, forgetCNI: true}, notOurs: !sandbox}
}

// liveness is what a sync concludes of a sandbox's life.
type liveness int

const (
	running        liveness = iota
	notRunning              // its namespace is gone: nothing to attach to (asked again next time)
	stoppedForGood          // containerd says its task stopped
)

// live says whether a sandbox runs: a start seen since the last sync says
// so; otherwise containerd's task (stopped: for good) and HCN's namespace
// (it must still exist) tell, each asked for when needed. A sandbox
// without a Windows namespace runs for containerd alone.
func live(sb *SandboxInfo, started bool, f facts) (liveness, ask, error) {
	if started {
		return running, decided, nil
	}
	if !f.taskRead {
		return 0, askTask, nil
	}
	switch {
	case f.taskErr != nil:
		return notRunning, decided, f.taskErr
	case f.task == TaskStopped:
		return stoppedForGood, decided, nil
	case sb.NetNS == "" && f.task == TaskRunning:
		return running, decided, nil
	case sb.NetNS == "":
		return notRunning, decided, nil
	case !f.nsRead:
		return 0, askNamespace, nil
	case f.nsErr != nil:
		return notRunning, decided, f.nsErr
	case !f.nsExists:
		return notRunning, decided, nil
	}
	return running, decided, nil
}

// notProvided splits the pod's policies into those no other endpoint of
// its namespace maps (ours to make) and those another one, the CNI's,
// maps already (HNS takes a host port once), each with whether it will
// work on the CNI's network (its type, from types); unknown lists the
// networks whose type is needed and not in types, until they were read
// (read: a network HNS did not know has no type).
func notProvided(others []hcn.Endpoint, policies []hcn.PortMappingPolicy, types map[string]hcn.NetworkType, read bool) (ours []hcn.PortMappingPolicy, cni []CNIMapping, unknown []string) {
	for _, p := range policies {
		pv := hcn.ProvidedBy(p, others)
		if pv == nil {
			ours = append(ours, p)
			continue
		}
		netType, ok := types[hcn.CanonicalGUID(pv.Endpoint.NetworkID)]
		if !ok && !read {
			if !slices.Contains(unknown, pv.Endpoint.NetworkID) {
				unknown = append(unknown, pv.Endpoint.NetworkID)
			}
			continue
		}
		works, why, fix := pv.Effective(netType)
		cni = append(cni, CNIMapping{Policy: p, Endpoint: pv.Endpoint.ID, Name: pv.Endpoint.Name, V1NAT: pv.V1NAT,
			Works: works, Why: why, Fix: fix})
	}
	return ours, cni, unknown
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

// inputs are the values a sync decides with, taken once as it began: the
// admission policy (a reload replaces it), the namespaces' labels as the
// API server had last said them, and the configuration's options.
type inputs struct {
	policy         *admission.Policy    // nil: admit everything
	labels         admission.Namespaces // a view as of the sync; nil: they cannot be read
	sources        request.Sources
	limits         request.Limits
	policyOptions  request.PolicyOptions
	hyperVHandlers []string
}

// admit is how Resolve admits what a pod asks for and does not hold yet:
// every mapping by the node's rules, the annotation's also by its
// namespace's Pod Security level (hostPorts passed it at the API server).
func (in inputs) admit() func(p Pod, all, annotated []request.PortMapping) error {
	if in.policy == nil {
		return nil
	}
	return admission.Admitter{Policy: in.policy, Labels: in.labels}.Admit
}

// hyperV says why the sandbox is Hyper-V isolated, "" when it is not.
func (in inputs) hyperV(p Pod, sb *SandboxInfo) string {
	if sb.HyperV != "" {
		return sb.HyperV
	}
	if h := p.RuntimeHandler; h != "" && slices.Contains(in.hyperVHandlers, h) {
		return "runtime handler " + h
	}
	return ""
}

// facts are what the sync read for decide, each only once decide asked
// for it: containerd's record and task, HCN's namespace, the other
// endpoints of the pod's namespace and their networks' types.
type facts struct {
	record         *SandboxInfo
	recordErr      error
	recordRead     bool
	task           TaskState
	taskErr        error
	taskRead       bool
	nsExists       bool
	nsErr          error
	nsRead         bool
	neighbours     []hcn.Endpoint
	neighboursErr  error
	neighboursRead bool
	netTypes       map[string]hcn.NetworkType // canonical network ID -> type
	netTypesErr    error
	netTypesRead   bool
}

// ask is a fact decide needs before it can decide.
type ask int

const (
	decided         ask = iota // nothing more: the plan's steps are the decision
	askRecord                  // containerd's record of the sandbox
	askTask                    // containerd's state of the sandbox's task
	askNamespace               // whether HCN still has the pod's namespace
	askNeighbours              // the other endpoints of the pod's namespace
	askNetworkTypes            // the types of the networks in plan.networks
)

// plan is a decision: a fact to read first (ask), or the steps to take and
// the outcome once they are done. The steps, each taken only when the one
// before succeeds: remove the sandbox's endpoints and give back its host
// ports (then what removed says is known); claim the host ports of want
// and make HNS hold its endpoint. Then err, if any, is what the sync
// failed with; notOurs fails a stop that removed nothing of a container
// never known as a sandbox (an application container's).
type plan struct {
	ask      ask
	networks []string // askNetworkTypes: the network IDs
	out      outcome
	remove   bool
	removed  afterRemoval
	want     *want
	err      error
	notOurs  bool
}

// afterRemoval is what is known once a removal is done: containerd no
// longer has the sandbox, and the CNI's mappings are forgotten.
type afterRemoval struct{ gone, forgetCNI bool }

// refuse is a plan that takes no step and fails with err.
func (o outcome) refuse(err error) plan { return plan{out: o, err: err} }

// want is the endpoint a sync decided the sandbox should have.
type want struct {
	netns    hcn.GUID
	policies []hcn.PortMappingPolicy
	cni      []CNIMapping
	dns      hcn.DNS
}
