package plugin

import (
	"errors"
	"fmt"
	"slices"

	"github.com/sirupsen/logrus"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/admission"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/hostsockets"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/request"
)

// decide is the controller's one decision, a function of values: the
// sandbox's snapshot, the facts the sync has read for it, and the inputs
// as the sync began. It reads nothing else and changes nothing. Its plan
// either asks for one more fact (the sync reads it and decides again) or
// names every step to take, in order: the host ports to claim, then HNS's
// steps (hcn.Diff's, hcn.Removal's), and what is known once they are done.
// The steps of the decision, each a function below: 0 learned (what a
// listing of HNS showed), 1 decideStopped, 2 preview (a whole pod judged
// before any read), 3 fromRecord (containerd's record, and the request
// resolved from it once), 4 live, 5 admit (a step of its own) or deny,
// 6 skip, 7 want (and the NetworkPolicy half of admission), 8 build (the
// network and the sandbox's endpoints, diffed; before them, the node's
// own sockets on ports not held yet). Steps 1 to 7 judge the pod; once
// they come to a build, the judgement rides in the plan to the passes
// that read the build's facts (facts.judged): a pod is admitted once a
// sync.
func decide(sn snap, f facts, in inputs) plan {
	o := learned(sn)
	switch {
	case !sn.act:
		return plan{out: o}
	case sn.stopped || sn.removed: // 1
		return decideStopped(sn, f, in, o)
	}
	if f.judged != nil { // judged on an earlier pass: the build's facts were read since
		return build(f, in, f.judged.out, f.judged.w)
	}
	if p, done := preview(sn, f, in, o); done { // 2
		return p
	}
	if p, done := fromRecord(sn, f, in, &o); done { // 3
		return p
	}
	if p, done := live(sn, f, in, &o); done { // 4
		return p
	}
	r := f.request.v
	o.pod, o.unreadable = r.Pod, r.Unreadable
	if f.request.err != nil { // 5
		return deny(f, in, o, f.request.err)
	}
	if err := admit(in, o.known, r); err != nil {
		return deny(f, in, o, err)
	}
	if r.Unreadable != nil {
		o.skipped = append(o.skipped, SkipCRIRecordUnreadable)
	}
	if p, done := skip(sn, f, in, &o, r); done { // 6
		return p
	}
	return want(f, in, o, r) // 7, 8
}

// learned is the outcome's start: what is known, and what a listing of HNS
// taken since the last sync showed of the sandbox (0).
func learned(sn snap) outcome {
	o := outcome{known: sn.known, pod: sn.pod}
	if o.pod.ID == "" {
		o.pod = Pod{ID: sn.id, Partial: true}
	}
	if !sn.listing {
		return o
	}
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
	return o
}

// decideStopped plans the removal of what a stopped sandbox still has;
// the sandbox is forgotten once containerd no longer has it either. A
// listing of containerd that lacked it, or a start after the stop of a
// container never seen as a sandbox, asks containerd (the one read of a
// stop, and only then).
func decideStopped(sn snap, f facts, in inputs, o outcome) plan {
	removed, sandbox := sn.removed, sn.sandbox
	if (sn.verify || (sn.started && !sandbox)) && !removed {
		if !f.record.read {
			return plan{ask: askRecord}
		}
		switch {
		case errors.Is(f.record.err, ErrSandboxNotFound):
			removed = true
		case f.record.err == nil && f.record.v.IsSandbox:
			o.known.sandbox, sandbox = true, true
		}
	}
	p := removal(f, in, o, afterRemoval{gone: removed, forgetCNI: true})
	p.notOurs = !sandbox
	return p
}

// preview judges a whole pod whose annotation is the only source before
// anything is read (2): a bad annotation is refused; one asking nothing,
// with nothing in HNS, costs nothing.
func preview(sn snap, f facts, in inputs, o outcome) (plan, bool) {
	if sn.pod.Partial || sn.pod.ID == "" || in.sources.CRI || f.record.read {
		return plan{}, false
	}
	ms, err := request.Annotated(sn.pod, in.sources, in.limits)
	switch {
	case err != nil:
		return deny(f, in, o, err), true
	case len(ms) == 0 && o.known.settled() && len(o.known.eps) == 0:
		return plan{out: o}, true
	}
	return plan{}, false
}

// fromRecord asks for containerd's record (3): gone, nothing is left of
// the sandbox; unreadable, it is tried again; an application container's
// is not ours; a pod that asks nothing loses what it has, whether it runs
// or not.
func fromRecord(sn snap, f facts, in inputs, o *outcome) (plan, bool) {
	if !f.record.read {
		return plan{ask: askRecord}, true
	}
	switch {
	case errors.Is(f.record.err, ErrSandboxNotFound):
		p := removal(f, in, *o, afterRemoval{gone: true, forgetCNI: true})
		p.err = f.record.err
		return p, true
	case f.record.err != nil:
		return o.refuse(fmt.Errorf("reading the sandbox from containerd: %w", f.record.err)), true
	case !f.record.v.IsSandbox:
		return o.refuse(ErrNotSandbox), true
	}
	o.known.sandbox = true
	if r := f.request.v; f.request.err == nil && r.Known && r.Unreadable == nil && len(r.Mappings) == 0 {
		o.pod = r.Pod
		return removal(f, in, *o, afterRemoval{}), true
	}
	return plan{}, false
}

// live says whether the sandbox runs (4): a start seen since the last
// sync says so; otherwise containerd's task (stopped: for good) and HCN's
// namespace tell, each asked for when needed. One that does not run loses
// its endpoints.
func live(sn snap, f facts, in inputs, o *outcome) (plan, bool) {
	if sn.started {
		return plan{}, false
	}
	netns := f.record.v.NetNS
	switch {
	case !f.task.read:
		return plan{ask: askTask}, true
	case f.task.err != nil:
		return o.refuse(fmt.Errorf("deciding whether the sandbox is live: %w", f.task.err)), true
	case f.task.v == TaskStopped: // containerd says so: CRI never starts a sandbox again
		o.known.final, o.known.cni = true, nil
		return removal(f, in, *o, afterRemoval{}), true
	case netns == "" && f.task.v == TaskRunning:
		return plan{}, false
	case netns != "" && !f.ns.read:
		return plan{ask: askNamespace}, true
	case netns != "" && f.ns.err != nil:
		return o.refuse(fmt.Errorf("deciding whether the sandbox is live: %w", f.ns.err)), true
	case netns != "" && f.ns.v:
		return plan{}, false
	}
	o.known.cni = nil // HCN says it no longer runs (no namespace): judged again next time
	return removal(f, in, *o, afterRemoval{}), true
}

// admit is admission, a step of the decision (5): every mapping the
// endpoint in place does not hold is judged as a new pod's would be, by
// the node's rules and, for the annotation's, the namespace's Pod
// Security level, with the policy and the labels as of the sync.
func admit(in inputs, k known, r request.Request) error {
	if in.policy == nil || !r.Known {
		return nil
	}
	all, annotated := request.Unheld(r.Mappings, r.Annotated, in.policyOptions, k.ports)
	return in.policy.AdmitRequest(admission.Pod{Namespace: r.Pod.Namespace, Labels: r.Pod.Labels}, all, annotated, in.labels)
}

// skip plans a pod whose endpoint of ours is not wanted (6): its request
// is not known (containerd's record does not decode), it asks for
// nothing, it has no Windows namespace, or it is Hyper-V isolated.
func skip(sn snap, f facts, in inputs, o *outcome, r request.Request) (plan, bool) {
	switch netns := f.record.v.NetNS; {
	case !r.Known:
		if r.Unreadable != nil {
			o.say(logrus.WarnLevel, "containerd's record of the sandbox does not decode: its request is not known",
				logrus.Fields{"error": r.Unreadable.Error()})
		}
		return plan{out: *o}, true // live, but its request is unknown here
	case len(r.Mappings) == 0:
		return removal(f, in, *o, afterRemoval{}), true
	case netns == "":
		if sn.started {
			o.say(logrus.InfoLevel, "sandbox has no Windows network namespace (Linux or HostProcess sandbox); skipped", nil)
			o.skipped = append(o.skipped, SkipNoNetNS)
		}
		return removal(f, in, *o, afterRemoval{}), true
	}
	if why := in.hyperV(r.Pod, f.record.v); why != "" {
		return hyperVIsolated(sn, f, in, o, why)
	}
	return plan{}, false
}

// hyperVIsolated plans a Hyper-V isolated sandbox (why says how it is
// known to be). Its endpoint is ours to build or keep while ncproxy's
// Setup waits for this sync (its utility VM takes the endpoint as a NIC
// once it is answered), or where the endpoint a Setup made is in place as
// HNS holds it (kept, never made again: build; a restart, or a listing
// of HNS taken before the Setup made it, asks HNS). Otherwise it is
// refused, and what it has is removed.
func hyperVIsolated(sn snap, f facts, in inputs, o *outcome, why string) (plan, bool) {
	switch {
	case in.nodeNetwork && sn.hyperV:
		o.hyperV, o.hyperVSetUp = true, true
		return plan{}, false
	case in.nodeNetwork:
		eps, p, ok := holding(f, *o)
		if !ok {
			return p, true
		}
		if len(eps) > 0 {
			o.hyperV = true
			return plan{}, false
		}
	}
	o.line.fields = logrus.Fields{"isolation": why}
	p := removal(f, in, *o, afterRemoval{})
	p.err = fmt.Errorf("%w (%s): %s", ErrHyperV, why, hyperVWayOut(in.nodeNetwork, o.known))
	return p, true
}

// hyperVWayOut is what a refused Hyper-V pod's owners can do; k says
// whether a Setup of ncproxy's for it had its answer, and what its last
// sync was refused for (a Setup's refusal stays the reason's first half).
func hyperVWayOut(nodeNetwork bool, k known) string {
	switch {
	case nodeNetwork && k.setUpTo > 0 && k.err != nil && k.reason != ReasonHyperV:
		return hyperVWayOut(true, known{setUpTo: k.setUpTo}) + "; its setup was refused: " + k.err.Error()
	case nodeNetwork && k.setUpTo > 0:
		return "its utility VM took its adapters when ncproxy set the pod up, and takes no endpoint made since: " +
			"restart the pod to map its host ports again"
	case nodeNetwork:
		return "its utility VM takes an endpoint only through ncproxy, and ncproxy did not ask this plugin for the pod's network: " +
			"set NCProxyAddr in the runtime handler's options (containerd's config) and point ncproxy's node_net_svc_addr at " +
			"hyperv.node_network_service"
	}
	return "its utility VM takes the namespace's endpoints only when it starts, so an endpoint added now would never reach it; " +
		"map host ports of Hyper-V pods with the CNI's portMappings, or serve ncproxy's NodeNetworkService (hyperv.node_network_service)"
}

// want plans the endpoint the pod asks for (7): its host ports less those
// the CNI's endpoint maps itself, with its own DNS. The other endpoints of
// the pod's namespace (the CNI's) are asked of HNS once, and only where
// they matter: for hostPorts, which the CNI may map itself (it is given
// them as portMappings; HNS would refuse the same mapping twice), and for
// a pod whose record has no DNS, which gets the CNI endpoint's DNS on ours
// instead of HNS's fill-in of the node's. The pod's own DNS, where its
// record has it, is never replaced by the CNI's.
func want(f facts, in inputs, o outcome, r request.Request) plan {
	w := wanted{netns: f.record.v.NetNS, policies: r.Policies, dns: r.DNS}
	if r.HostPorts || r.NoDNS || o.hyperV { // a Hyper-V pod's VM is given them
		if !f.neighbours.read {
			return plan{ask: askNeighbours}
		}
		if f.neighbours.err != nil {
			return o.refuse(f.neighbours.err)
		}
		o.neighbours, o.neighboursRead = f.neighbours.v, true
	}
	if r.NoDNS {
		w.dns = hcn.NeighbourDNS(f.neighbours.v)
	}
	if r.HostPorts {
		if f.netTypes.err != nil {
			return o.refuse(f.netTypes.err)
		}
		ours, cni, unknown := notProvided(f.neighbours.v, w.policies, f.netTypes.v, f.netTypes.read)
		if len(unknown) > 0 {
			return plan{ask: askNetworkTypes, networks: unknown}
		}
		w.policies, w.cni = ours, cni
	}
	if len(w.policies) == 0 { // the CNI maps them all: ours would hold host ports nobody asks for
		return byTheCNI(f, in, o, w)
	}
	if err := admitNetwork(in, o, w); err != nil {
		p := removal(f, in, o, afterRemoval{})
		p.err = err
		return p
	}
	p := build(f, in, o, w)
	if p.ask != decided { // 8 reads its facts next: the pod is judged
		p.judged = &judged{out: o, w: w}
	}
	return p
}

// admitNetwork is the second half of admission (7): every host port of
// ours, held or not, is one the pod's NetworkPolicies open (a policy that
// changed unmaps what is in place; the CNI's ports are filtered by the
// policy engine).
func admitNetwork(in inputs, o outcome, w wanted) error {
	if in.policy == nil {
		return nil
	}
	return in.policy.AdmitNetwork(admission.Pod{Namespace: o.pod.Namespace, Labels: o.pod.Labels}, w.policies, in.netpols)
}

// byTheCNI plans a pod whose host ports the CNI's endpoint maps, every
// one: no endpoint of ours.
func byTheCNI(f facts, in inputs, o outcome, w wanted) plan {
	if !slices.Equal(o.known.cni, w.cni) {
		o.countCNI(w.cni)
		o.say(logrus.InfoLevel, "host ports all mapped by the CNI's endpoint in the pod's namespace", logrus.Fields{"cni": fmt.Sprint(w.cni)})
	}
	o.known.cni = w.cni
	o.mapped = &mapped{cni: w.cni}
	return removal(f, in, o, afterRemoval{})
}

// build plans HNS's steps for the endpoint w (8), which the pod's
// NetworkPolicies admit: the node's own sockets on the ports the sandbox
// does not hold yet, then the network as the manager knows it and the
// sandbox's endpoints as HNS holds them (what is known, or asked), diffed
// (hcn.Diff); the host ports are claimed first.
func build(f facts, in inputs, o outcome, w wanted) plan {
	fresh := freshPorts(in, o, w)
	if need := needed(f, fresh); need != decided { // read together: one pass
		return plan{ask: need, ports: hostsockets.PortsOf(fresh)}
	}
	if p, done := hostHeld(f, in, o, fresh); done {
		return p
	}
	if f.target.err != nil {
		return o.refuse(f.target.err)
	}
	existing, p, ok := holding(f, o)
	if !ok {
		return p
	}
	t := f.target.v
	steps := hcn.Diff(t.Spec(hcn.Desired{SandboxID: o.pod.ID, Namespace: w.netns, Policies: w.policies, DNS: w.dns}), w.netns, existing, t.RoutesStored)
	if o.hyperV && !o.hyperVSetUp && slices.ContainsFunc(steps, notKeepOrDelete) { // only a Setup gives the VM an endpoint
		p := removal(f, in, o, afterRemoval{})
		p.err = fmt.Errorf("%w: %s", ErrHyperV, hyperVWayOut(true, o.known))
		return p
	}
	return plan{out: o, want: &w, steps: steps}
}

// notKeepOrDelete: the step does more than keep or delete an endpoint
// (a create or an attach, or any kind added later): outside ncproxy's
// Setup a Hyper-V pod's VM would never see what it makes.
func notKeepOrDelete(s hcn.Step) bool { return s.Kind != hcn.StepKeep && s.Kind != hcn.StepDelete }

// freshPorts is w's ports the sandbox does not hold yet, where the
// node's own sockets are read (none where they are not): a program that
// binds a port after the pod was mapped does not unmap the pod.
func freshPorts(in inputs, o outcome, w wanted) []hcn.PortMappingPolicy {
	if !in.hostSockets {
		return nil
	}
	var fresh []hcn.PortMappingPolicy
	held := hcn.Keys(o.known.ports)
	for _, p := range w.policies {
		if !held[p.Key()] {
			fresh = append(fresh, p)
		}
	}
	return fresh
}

// needed is the facts a build reads before it decides: the node's sockets
// on the fresh ports, the network.
func needed(f facts, fresh []hcn.PortMappingPolicy) ask {
	var need ask
	if len(fresh) > 0 && !f.sockets.read {
		need |= askHostSockets
	}
	if !f.target.read {
		need |= askTarget
	}
	return need
}

// hostHeld refuses a pod asking a host port a program of the node holds
// (8): a WinNAT mapping would take that program's traffic. Only the fresh
// ports are judged, from the node's sockets on them.
func hostHeld(f facts, in inputs, o outcome, fresh []hcn.PortMappingPolicy) (plan, bool) {
	switch {
	case len(fresh) == 0:
		return plan{}, false
	case f.sockets.err != nil:
		return o.refuse(f.sockets.err), true
	}
	for _, p := range fresh {
		if s, held := hostsockets.Holding(f.sockets.v, p); held {
			return deny(f, in, o, &hostsockets.HeldError{Policy: p, By: s}), true
		}
	}
	return plan{}, false
}

// holding is the sandbox's endpoints as HNS holds them: what is known,
// when that is settled (nothing a given-up call may still make), else the
// fact asked of HNS (ok false: the plan that asks for it).
func holding(f facts, o outcome) ([]hcn.Endpoint, plan, bool) {
	switch {
	case o.known.settled():
		return o.known.eps, plan{}, true
	case !f.endpoints.read:
		return nil, plan{ask: askEndpoints}, false
	case f.endpoints.err != nil:
		return nil, o.refuse(f.endpoints.err), false
	}
	return f.endpoints.v, plan{}, true
}

// removal plans the deletion of every endpoint the sandbox has, and after
// it what removed says; ports a given-up call asked for stay held while
// that call may still take effect (unsure).
func removal(f facts, in inputs, o outcome, removed afterRemoval) plan {
	eps, p, ok := holding(f, o)
	if !ok {
		return p
	}
	return plan{out: o, steps: hcn.Removal(eps), removed: removed, remove: true, unsure: stillUnsure(o.known, eps, in)}
}

// deny plans a refused pod (5): it fails with err and holds nothing it
// was not admitted for: an endpoint in place mapping exactly the ports it
// holds stays; any other of ours (made late for a given-up create, or
// built under inputs that changed before its commit) is deleted. A
// failure to read (containerd, HNS) is refuse's, which takes no step.
func deny(f facts, in inputs, o outcome, err error) plan {
	if o.known.settled() {
		return o.refuse(err)
	}
	eps, p, ok := holding(f, o)
	if !ok {
		return p
	}
	var drop, keep []hcn.Endpoint
	for _, ep := range eps {
		if len(o.known.ports) > 0 && ep.Namespace != "" && hcn.SameBehaviour(ep.PortMappings, o.known.ports) {
			keep = append(keep, ep)
		} else {
			drop = append(drop, ep)
		}
	}
	return plan{out: o, steps: hcn.Removal(drop), err: err, denied: true, kept: keep, unsure: stillUnsure(o.known, eps, in)}
}

// stillUnsure is the ports a given-up call asked for that stay held after
// a plan that found eps in HNS: none once HNS shows an endpoint of the
// sandbox (the call took effect) or the late bound (Options.LateBound) has passed;
// until then the call may still land, and the ports go to nobody else.
func stillUnsure(k known, eps []hcn.Endpoint, in inputs) []hcn.PortMappingPolicy {
	if len(k.unsure) == 0 || len(eps) > 0 || in.now.Sub(k.unsureSince) >= in.lateBound {
		return nil
	}
	return k.unsure
}

// sameEndpoints reports whether a and b are the same endpoints, attached
// alike and mapping alike.
func sameEndpoints(a, b []hcn.Endpoint) bool {
	if len(a) != len(b) {
		return false
	}
	for _, x := range a {
		if !slices.ContainsFunc(b, func(y hcn.Endpoint) bool {
			return x.ID == y.ID && x.Namespace == y.Namespace && hcn.SamePolicies(x.PortMappings, y.PortMappings)
		}) {
			return false
		}
	}
	return true
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
		m := CNIMapping{Policy: p, Endpoint: pv.Endpoint.ID, Name: pv.Endpoint.Name, V1NAT: pv.V1NAT, Works: works, Why: why, Fix: fix}
		if pv.Wider {
			m.HostIPDropped = p.VIP
		}
		cni = append(cni, m)
	}
	return ours, cni, unknown
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

func (f *fact[T]) set(v T, err error) { f.v, f.err, f.read = v, err, true }

// refuse is a plan that takes no step and fails with err.
func (o outcome) refuse(err error) plan { return plan{out: o, err: err} }

func (o *outcome) fail(err error) outcome {
	o.err = err
	return *o
}

func (o *outcome) say(level logrus.Level, msg string, fields logrus.Fields) {
	o.line = line{level: level, msg: msg, fields: fields}
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
