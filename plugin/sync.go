package plugin

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/request"
)

// sync is the controller's one piece of work for a sandbox, for every
// trigger alike: decide (decide.go) says which facts it needs next, read
// here, and once it has them every step to take; apply takes them. Its I/O
// goes through containerd (SandboxStore) and hcn.Manager alone; of the
// state it writes one thing, its claim of host ports.
func (c *Core) sync(ctx context.Context, sn snap, in inputs) outcome {
	var f facts
	for {
		p := decide(sn, f, in)
		if p.ask == decided {
			return c.apply(ctx, sn, p)
		}
		if p.judged != nil {
			f.judged = p.judged
		}
		c.read(ctx, sn, in, p, &f)
	}
}

// inputs are the values a sync decides with: the admission policy and
// the namespaces' labels as of now, the options, and the moment.
func (c *Core) inputs() inputs {
	now := c.now()
	in := inputs{gen: c.inputsGen.Load(), now: now, lateBound: c.opt.LateBound, policy: c.policy.Load(), sources: c.opt.Inputs, limits: c.opt.Limits,
		policyOptions: c.opt.Policy, hyperVHandlers: c.opt.HyperVHandlers, nodeNetwork: c.opt.NodeNetwork, hostSockets: c.opt.Sockets != nil}
	if l := c.labels.Load(); l != nil {
		v := *l
		v.At = now
		in.labels = &v
	}
	if n := c.netpols.Load(); n != nil {
		v := *n
		v.At = now
		in.netpols = &v
	}
	return in
}

// read reads the facts p asks for into f.
func (c *Core) read(ctx context.Context, sn snap, in inputs, p plan, f *facts) {
	if p.ask&askRecord != 0 {
		f.record.set(c.store.Sandbox(ctx, sn.id))
		if f.record.err == nil {
			f.request.set(request.Resolve(request.Ask{Pod: sn.pod, Metadata: f.record.v.Metadata, Sources: in.sources,
				Limits: in.limits, Policy: in.policyOptions}))
		}
	}
	if p.ask&askTask != 0 {
		f.task.set(c.store.TaskState(ctx, sn.id))
	}
	if p.ask&askNamespace != 0 {
		f.ns.set(c.mgr.NamespaceExists(ctx, f.record.v.NetNS))
	}
	if p.ask&askNeighbours != 0 {
		var ours []string // known ours: not opened
		for _, ep := range sn.known.eps {
			ours = append(ours, ep.ID)
		}
		f.neighbours.set(c.mgr.Neighbours(ctx, f.record.v.NetNS, sn.id, ours...))
	}
	if p.ask&askNetworkTypes != 0 {
		f.netTypes.set(c.networkTypes(ctx, f.netTypes.v, p.networks))
	}
	if p.ask&askHostSockets != 0 {
		f.sockets.set(c.opt.Sockets.On(ctx, p.ports))
	}
	if p.ask&askTarget != 0 {
		f.target.set(c.mgr.Target(ctx))
	}
	if p.ask&askEndpoints != 0 {
		f.endpoints.set(c.mgr.Lookup(ctx, sn.id))
	}
}

// networkTypes adds the types of the networks ids to types.
func (c *Core) networkTypes(ctx context.Context, types map[string]hcn.NetworkType, ids []string) (map[string]hcn.NetworkType, error) {
	if types == nil {
		types = map[string]hcn.NetworkType{}
	}
	for _, id := range ids {
		t, err := c.mgr.NetworkType(ctx, id)
		if err != nil {
			return types, err
		}
		types[hcn.CanonicalGUID(id)] = t
	}
	return types, nil
}

// apply takes p's steps, each only when the one before succeeded: the
// claim of the host ports of the endpoint it wants (7), then HNS's steps
// (8). It returns the outcome: p's, with what the steps did, failed with
// the first step's error, else with p's.
func (c *Core) apply(ctx context.Context, sn snap, p plan) outcome {
	o := p.out
	if p.want == nil && !p.remove && !p.denied { // no step
		if p.err != nil {
			return o.fail(p.err)
		}
		return o
	}
	if p.want != nil {
		if conflict := c.st.claim(sn.id, o.pod.HolderName(), p.want.policies); conflict != nil {
			return conflicted(sn, o, conflict)
		}
	}
	r, err := c.mgr.Apply(ctx, p.steps)
	switch {
	case err != nil:
		return c.failed(o, p, err)
	case p.want != nil:
		return built(o, *p.want, r)
	}
	return c.settled(o, p, r)
}

// conflicted is the outcome of a claim another sandbox holds a port of:
// decided once the holder's own sync has confirmed it live since this
// sandbox first waited for it; until then the holder is synced (a gone or
// stopping one gives the ports back) and the wait recorded.
func conflicted(sn snap, o outcome, ce *ConflictError) outcome {
	if prev := sn.known.waitFor; prev != nil && prev.holder == ce.HolderID && ce.confirmed > prev.seen {
		return o.fail(ce)
	}
	if prev := sn.known.waitFor; prev == nil || prev.holder != ce.HolderID {
		o.known.waitFor = &holderWait{holder: ce.HolderID, seen: ce.confirmed}
	}
	o.also = append(o.also, ce.HolderID)
	return o.fail(fmt.Errorf("%w: %w", errHolderPending, ce))
}

// failed is the outcome of a plan whose step failed with err: what HNS
// holds is not known, its ports stay held, and where HNS may still make
// what it was asked (a create given up on) the ports asked are held as
// unsure (stillUnsure says until when), admitted again by the next sync.
func (c *Core) failed(o outcome, p plan, err error) outcome {
	o.known.eps, o.known.epsKnown = nil, false
	if p.want != nil && !hcn.Permanent(err) {
		o.known.unsure, o.known.unsureSince = withPorts(o.known.unsure, p.want.policies), c.now()
	}
	if p.want != nil && errors.Is(err, hcn.ErrPortInUse) { // HNS holds the port, though the claim said no pod of ours does
		err = fmt.Errorf("%w; no pod this plugin manages held it when this one asked: another process, a CNI's endpoint "+
			"in another pod's namespace, or a port HNS kept after a delete (kubernetes#137530) holds it; see Get-HnsEndpoint "+
			"(or hnsdiag list endpoints) and netstat -ano", err)
	}
	return o.fail(err)
}

// built is the outcome of a plan that built w: HNS holds its endpoint,
// and the sandbox holds its host ports (those a given-up call asked for
// and this endpoint does not map go back).
func built(o outcome, w wanted, r hcn.Result) outcome {
	ep := r.Endpoint
	o.known.eps, o.known.epsKnown, o.known.ports = []hcn.Endpoint{*ep}, true, slices.Clone(w.policies)
	o.known.unsure, o.known.unsureSince = nil, time.Time{}
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
	fields := logrus.Fields{"endpoint": ep.ID, "netns": w.netns, "mappings": strings.Join(hcn.Runs(w.policies), ", ")}
	if len(w.cni) > 0 {
		fields["cni"] = fmt.Sprint(w.cni)
	}
	switch {
	case r.Outcome != hcn.Unchanged:
		fields["outcome"] = r.Outcome.String()
		o.change = Built
		o.say(logrus.InfoLevel, "endpoint attached", fields)
	case cniChanged:
		o.change = Kept
		o.say(logrus.InfoLevel, "endpoint in place; what the CNI maps changed", fields)
	default:
		o.change = Kept
		o.say(logrus.DebugLevel, "endpoint already in place", fields)
	}
	return o
}

// settled is the outcome of a removal or a refusal whose steps were taken:
// what stays in HNS is what the plan kept, the ports a given-up call may
// still take stay held as the plan says (and the sandbox is synced again
// when they no longer need to be), and the plan's error is the sync's.
func (c *Core) settled(o outcome, p plan, r hcn.Result) outcome {
	o.known.eps, o.known.epsKnown = p.kept, true
	if len(p.kept) == 0 {
		o.known.ports = nil
	}
	if p.remove {
		o.known.gone = o.known.gone || p.removed.gone
		if p.removed.forgetCNI {
			o.known.cni = nil
		}
	}
	o.known.unsure = p.unsure
	if len(p.unsure) == 0 {
		o.known.unsureSince = time.Time{}
	} else {
		o.recheck = max(o.known.unsureSince.Add(c.opt.LateBound).Sub(c.now()), 0)
	}
	if r.Deleted > 0 {
		o.change = Removed
		o.say(logrus.InfoLevel, "endpoint removed", logrus.Fields{"endpoints": r.Deleted})
	}
	switch {
	case p.notOurs && o.change == NoChange:
		return o.fail(ErrNotSandbox) // nothing of ours, maybe an application container
	case p.err != nil:
		return o.fail(p.err)
	}
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
