package plugin

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/sirupsen/logrus"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/request"
)

// sync is the controller's one decision: for every trigger alike (an NRI
// request, a containerd event, Synchronize, a resync, a retry) it reads
// what should be (what triggers recorded, containerd's record and task
// state, the pod's request) and what is (the sandbox's endpoint, as the
// state knows it or HNS says), and converges. The steps, in order:
//
//  1. a stopped or removed sandbox loses its endpoint and its host ports;
//  2. a request the trigger gave whole, with the annotation as its only
//     source, is decided without I/O: a bad one fails, none costs nothing;
//  3. containerd's record: gone means nothing is left, an application
//     container is not ours;
//  4. live? a start seen says so; otherwise containerd's task and HCN's
//     namespace tell; a sandbox that no longer runs is stopped (1);
//  5. the request: the mappings from its sources, limits, admission;
//  6. nothing asked for, no Windows namespace, Hyper-V isolation, or all
//     of it mapped by the CNI already (asked only of a pod with hostPorts,
//     the only mappings a CNI is given): no endpoint of ours;
//  7. the host ports: a pod holding one makes this sync wait for that
//     pod's own sync, once, which tells whether it still runs;
//  8. the endpoint: kept, replaced, created and attached (hcn.Manager).
func (c *Core) sync(ctx context.Context, id string, in syncInput) (Change, error) {
	p := in.pod
	if p.ID == "" {
		p = Pod{ID: id, Partial: true}
	}
	if in.stopped || in.removed { // 1
		return c.syncStopped(ctx, id, p, in)
	}
	var annotated []request.PortMapping // 2
	decided := !p.Partial && !c.opt.Inputs.CRI
	if decided {
		ms, err := c.mappings(p)
		if err != nil {
			c.report(p, nil, nil, nil, err)
			return NoChange, err
		}
		if eps, known := c.st.endpoints(id); len(ms) == 0 && known && len(eps) == 0 {
			return NoChange, nil
		}
		annotated = ms
	}
	sb, err := c.store.Sandbox(ctx, id) // 3
	switch {
	case errors.Is(err, ErrSandboxNotFound):
		ch, terr := c.teardown(ctx, id, p)
		if terr != nil {
			return ch, terr
		}
		c.st.forget(id)
		return ch, errPod(p, err)
	case err != nil:
		return NoChange, errPod(p, fmt.Errorf("reading the sandbox from containerd: %w", err))
	case !sb.IsSandbox:
		return NoChange, fmt.Errorf("container %s: %w", id, ErrNotSandbox)
	}
	c.st.markSandbox(id)
	state, err := c.live(ctx, sb, in.started) // 4
	if err != nil {
		return NoChange, errPod(p, fmt.Errorf("deciding whether the sandbox is live: %w", err))
	}
	switch state {
	case stoppedForGood: // containerd says so: CRI never starts a sandbox again
		c.st.tombstone(id)
		c.st.setCNI(id, nil)
		return c.teardown(ctx, id, p)
	case notRunning: // HCN says so (no namespace): judged again next time
		c.st.setCNI(id, nil)
		return c.teardown(ctx, id, p)
	}
	req, err := c.request(p, sb, annotated, decided) // 5
	if err != nil {
		c.report(req.pod, nil, nil, nil, err)
		return NoChange, err
	}
	p = req.pod
	log := c.PodLog(p)
	switch { // 6
	case !req.known:
		return NoChange, nil // live, but its request is unknown here
	case len(req.mappings) == 0:
		return c.teardown(ctx, id, p)
	case sb.NetNS == "":
		if in.started {
			log.Info("sandbox has no Windows network namespace (Linux or HostProcess sandbox); skipped")
			c.opt.Observer.Skipped(SkipNoNetNS)
		}
		return c.teardown(ctx, id, p)
	}
	if why := c.hyperV(p, sb); why != "" {
		if _, err := c.teardown(ctx, id, p); err != nil {
			return NoChange, err
		}
		log.WithField("isolation", why).Warn("Hyper-V isolated pod: host ports refused")
		err := errPod(p, fmt.Errorf("%w (%s): its utility VM takes the namespace's endpoints only when it starts, "+
			"so an endpoint added now would never reach it; map host ports of Hyper-V pods with the CNI's portMappings", ErrHyperV, why))
		c.report(p, nil, nil, nil, err)
		return NoChange, err
	}
	policies := request.BuildPolicies(req.mappings, c.opt.Policy)
	var cni []CNIMapping
	if req.hostPorts {
		// the CNI may map the pod's hostPorts itself (it is given them as
		// portMappings; win-bridge honours them): HNS would refuse the same
		// mapping twice. A pod without hostPorts gives the CNI nothing to
		// map, and HNS is not asked.
		if policies, cni, err = c.notProvided(ctx, id, sb.NetNS, policies); err != nil {
			return NoChange, errPod(p, err)
		}
		if len(policies) == 0 { // the CNI maps them all
			ch, err := c.teardown(ctx, id, p)
			if err == nil && c.st.setCNI(id, cni) {
				c.countCNI(cni)
				log.WithField("cni", fmt.Sprint(cni)).Info("host ports all mapped by the CNI's endpoint in the pod's namespace")
			}
			c.report(p, nil, nil, cni, err)
			return ch, err
		}
	}
	undo, err := c.st.reserve(id, p.holderName(), policies) // 7
	if err != nil {
		var ce *ConflictError
		if errors.As(err, &ce) && !c.st.waitForHolder(id, ce.HolderID, in.waitFor) {
			// does the holder still run? Its own sync says: a gone or
			// stopping holder gives the ports back, a live one is confirmed
			c.enqueue(ce.HolderID, nil, nil)
			return NoChange, errPod(p, fmt.Errorf("%w: %w", errHolderPending, err))
		}
		c.describeHolder(ctx, err)
		err = errPod(p, err)
		c.report(p, nil, nil, nil, err)
		return NoChange, err
	}
	return c.converge(ctx, id, p, sb, policies, cni, undo) // 8
}

// converge makes HNS hold the sandbox's endpoint with policies.
func (c *Core) converge(ctx context.Context, id string, p Pod, sb *SandboxInfo, policies []hcn.PortMappingPolicy, cni []CNIMapping,
	undo func()) (Change, error) {
	existing, known := c.st.endpoints(id)
	if !known {
		var err error
		if existing, err = c.mgr.Lookup(ctx, id); err != nil {
			undo()
			err = errPod(p, err)
			c.report(p, nil, nil, nil, err)
			return NoChange, err
		}
	}
	ep, outcome, err := c.mgr.Converge(ctx, hcn.Desired{SandboxID: id, Namespace: sb.NetNS, Policies: policies}, existing)
	if err != nil {
		undo()
		c.st.setEndpoints(id, nil, false) // what HNS holds now is not known
		err = errPod(p, err)
		if hcn.NamespaceGone(err) { // the sandbox stopped meanwhile; the manager rolled back
			return NoChange, err
		}
		c.report(p, nil, nil, nil, err)
		return NoChange, err
	}
	c.st.setEndpoints(id, []hcn.Endpoint{*ep}, true)
	c.st.confirm(id)
	cniChanged := c.st.setCNI(id, cni)
	if cniChanged {
		c.countCNI(cni)
	}
	c.report(p, ep, policies, cni, nil)
	// who maps each of the pod's host ports, said once: ours, the CNI's
	log := c.PodLog(p).WithFields(logrus.Fields{"endpoint": ep.ID, "netns": sb.NetNS, "mappings": policyList(policies)})
	if len(cni) > 0 {
		log = log.WithField("cni", fmt.Sprint(cni))
	}
	if outcome == hcn.Unchanged {
		if cniChanged {
			log.Info("endpoint in place; what the CNI maps changed")
		} else {
			log.Debug("endpoint already in place")
		}
		return Kept, nil
	}
	log.WithField("outcome", outcome.String()).Info("endpoint attached")
	return Built, nil
}

// syncStopped removes what a stopped sandbox still has, and forgets the
// sandbox once containerd no longer has it either.
func (c *Core) syncStopped(ctx context.Context, id string, p Pod, in syncInput) (Change, error) {
	ch, err := c.teardown(ctx, id, p)
	if err != nil {
		return ch, err
	}
	c.st.setCNI(id, nil)
	removed, sandbox := in.removed, c.st.isSandbox(id)
	// A listing of containerd lacked it, or a start came after the stop of
	// a container never seen as a sandbox: containerd is asked (the one
	// lookup of a stop, and only then).
	if (in.verify || (in.started && !sandbox)) && !removed {
		sb, serr := c.store.Sandbox(ctx, id)
		switch {
		case errors.Is(serr, ErrSandboxNotFound):
			removed = true
		case serr == nil && sb.IsSandbox:
			c.st.markSandbox(id)
			sandbox = true
		}
	}
	if removed {
		c.st.forget(id)
	}
	if ch == NoChange && !sandbox {
		return NoChange, fmt.Errorf("container %s: %w", id, ErrNotSandbox) // nothing of ours, maybe an application container
	}
	return ch, nil
}

// teardown removes the sandbox's endpoints and gives its host ports back.
func (c *Core) teardown(ctx context.Context, id string, p Pod) (Change, error) {
	eps, known := c.st.endpoints(id)
	if !known {
		var err error
		if eps, err = c.mgr.Lookup(ctx, id); err != nil {
			return NoChange, errPod(p, err)
		}
	}
	n, err := c.mgr.Delete(ctx, eps)
	if err != nil {
		c.st.setEndpoints(id, nil, false)
		return NoChange, errPod(p, err)
	}
	c.st.setEndpoints(id, nil, true)
	c.st.release(id)
	if n == 0 {
		return NoChange, nil
	}
	c.PodLog(p).WithField("endpoints", n).Info("endpoint removed")
	return Removed, nil
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
func (c *Core) notProvided(ctx context.Context, id string, ns hcn.GUID, policies []hcn.PortMappingPolicy) ([]hcn.PortMappingPolicy, []CNIMapping, error) {
	others, err := c.mgr.Neighbours(ctx, ns, id)
	if err != nil || len(others) == 0 {
		return policies, nil, err
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
func (c *Core) countCNI(cni []CNIMapping) {
	for _, m := range cni {
		if m.Works {
			c.opt.Observer.Skipped(SkipMappedByCNI)
		} else {
			c.opt.Observer.Skipped(SkipCNIIneffective)
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

// describeHolder fills in the holder's pod name from containerd when the
// index only knew its sandbox ID.
func (c *Core) describeHolder(ctx context.Context, err error) {
	var ce *ConflictError
	if !errors.As(err, &ce) || ce.Holder != "" {
		return
	}
	sb, serr := c.store.Sandbox(ctx, ce.HolderID)
	if serr != nil || len(sb.Metadata) == 0 {
		return
	}
	if r, rerr := c.request(Pod{ID: ce.HolderID, Partial: true}, sb, nil, false); rerr == nil && r.pod.Name != "" {
		ce.Holder = r.pod.Namespace + "/" + r.pod.Name
	}
}

func policyList(ps []hcn.PortMappingPolicy) string { return fmt.Sprint(ps) }
