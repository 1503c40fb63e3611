package plugin

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/admission"
	"github.com/sirupsen/logrus"
)

// ErrDeadline: HCN did not finish a fail-closed pod start in time.
var ErrDeadline = errors.New("HCN did not finish within the deadline")

// transient reports whether retrying may help: HNS unreachable, a call that
// timed out, an unclassified HNS failure. A bad or denied request, a port
// held by another pod, a sandbox that is gone, or an HCN error hcn calls
// permanent is final.
func transient(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, errHolderBusy) || errors.Is(err, errHolderUnknown) {
		return true
	}
	for _, final := range []error{ErrInvalidPod, admission.ErrDenied, ErrPortConflict, ErrSandboxNotFound, ErrNotSandbox} {
		if errors.Is(err, final) {
			return false
		}
	}
	return !hcn.Permanent(err)
}

// Ensure gives a started sandbox the endpoint it asks for. A pod without
// mappings, or whose sandbox has no Windows network namespace, is skipped.
// An invalid request fails before anything is created.
func (c *Core) Ensure(ctx context.Context, p Pod) (Change, error) {
	p, ok, err := c.fastPath(p)
	if !ok {
		return NoChange, err
	}
	unlock := c.locks.lock(p.ID)
	defer unlock()
	return c.resolveAndApply(ctx, p)
}

// fastPath is the fast path: when the annotation alone decides (the source
// gave us the pod's annotations, and Kubernetes hostPort is not read), a pod
// without one costs neither a containerd nor an HNS call. A bad annotation
// is reported here, before anything is created. The parsed mappings travel
// with the returned pod, so the annotation is parsed once per start.
func (c *Core) fastPath(p Pod) (Pod, bool, error) {
	if p.Partial || c.opt.Inputs.CRI {
		return p, true, nil
	}
	ms, err := c.Mappings(p)
	if err != nil {
		return p, false, err
	}
	p.parsed, p.annotated = true, ms
	return p, len(ms) > 0, nil
}

// resolveAndApply reads the sandbox and ensures its endpoint; the caller holds
// the pod's lock.
func (c *Core) resolveAndApply(ctx context.Context, p Pod) (Change, error) {
	r, err := c.resolve(ctx, p)
	if err != nil {
		c.report(r, err)
		return NoChange, err
	}
	return c.apply(ctx, r)
}

// apply ensures r's endpoint and reports the outcome to the pod's owners.
func (c *Core) apply(ctx context.Context, r *resolved) (Change, error) {
	ch, err := c.applyResolved(ctx, r)
	c.report(r, err)
	return ch, err
}

func (c *Core) applyResolved(ctx context.Context, r *resolved) (Change, error) {
	log := c.PodLog(r.pod)
	if len(r.mappings) == 0 {
		return NoChange, nil
	}
	if r.sb.NetNS == "" {
		log.Info("sandbox has no Windows network namespace (Linux or HostProcess sandbox); skipped")
		c.opt.Observer.Skipped(SkipNoNetNS)
		return NoChange, nil
	}
	if why := c.hyperV(r); why != "" {
		if err := c.dropEarly(ctx, r.pod); err != nil {
			return NoChange, fmt.Errorf("pod %s: %w", r.pod, err)
		}
		log.WithField("isolation", why).Warn("Hyper-V isolated pod: host ports refused")
		return NoChange, fmt.Errorf("pod %s: %w (%s): its utility VM takes the namespace's endpoints only when it starts, "+
			"so an endpoint added now would never reach it; map host ports of Hyper-V pods with the CNI's portMappings", r.pod, ErrHyperV, why)
	}
	if c.stopped.has(r.pod.ID) {
		// stopped after this start or reconcile read it as running
		log.Debug("sandbox stopped meanwhile; no endpoint")
		return c.removeLocked(ctx, r.pod)
	}
	policies := hcn.BuildPolicies(r.mappings, c.opt.Policy)
	if c.opt.Inputs.CRI {
		// the CNI may map the pod's hostPorts itself (win-bridge honours
		// portMappings): HNS would refuse the same mapping twice
		var err error
		if policies, err = c.notProvided(ctx, log, r, policies); err != nil {
			return NoChange, fmt.Errorf("pod %s: %w", r.pod, err)
		}
		if len(policies) == 0 {
			return NoChange, nil
		}
	}
	undo, err := c.reserve(r.pod, policies)
	if err != nil {
		switch res, cause := c.reclaim(ctx, err); res {
		case reclaimed:
			undo, err = c.reserve(r.pod, policies)
		case holderBusy:
			// the holder's own start or stop runs now: try again after it
			return NoChange, fmt.Errorf("pod %s: %w: %w", r.pod, errHolderBusy, err)
		case holderUnknown:
			return NoChange, fmt.Errorf("pod %s: %w (%w): %w", r.pod, errHolderUnknown, cause, err)
		}
	}
	if err != nil {
		c.describeHolder(ctx, err)
		return NoChange, fmt.Errorf("pod %s: %w", r.pod, err)
	}
	ep, outcome, err := c.mgr.Ensure(ctx, hcn.Desired{SandboxID: r.pod.ID, Namespace: r.sb.NetNS, Policies: policies})
	if err != nil {
		undo()
		return NoChange, fmt.Errorf("pod %s: %w", r.pod, err)
	}
	return c.attached(r, ep, outcome, policies), nil
}

// attached records that r's pod has endpoint ep with policies, and logs
// what was done.
func (c *Core) attached(r *resolved, ep *hcn.Endpoint, outcome hcn.Outcome, policies []hcn.PortMappingPolicy) Change {
	log := c.PodLog(r.pod).WithFields(logrus.Fields{"endpoint": ep.ID, "netns": r.sb.NetNS})
	r.endpoint, r.policies = ep.ID, policies
	if outcome == hcn.Unchanged {
		log.Debug("endpoint already in place")
		return Kept
	}
	log.WithFields(logrus.Fields{"mappings": fmt.Sprint(r.mappings), "outcome": outcome.String()}).Info("endpoint attached")
	return Built
}

// dropEarly deletes, for a sandbox that gets no endpoint, one that an early
// create (startAhead) made and could not delete: the manager then no longer
// vouches that the sandbox has none, and HNS is asked. A sandbox it knows to
// have none costs no call.
func (c *Core) dropEarly(ctx context.Context, p Pod) error {
	if c.mgr.Fresh(p.ID) {
		return nil
	}
	_, err := c.mgr.Remove(ctx, p.ID)
	return err
}

// notProvided drops the policies another endpoint of the pod's namespace
// already provides, and logs each.
func (c *Core) notProvided(ctx context.Context, log *logrus.Entry, r *resolved, policies []hcn.PortMappingPolicy) ([]hcn.PortMappingPolicy, error) {
	others, err := c.mgr.Neighbours(ctx, r.sb.NetNS, r.pod.ID)
	if err != nil || len(others) == 0 {
		return policies, err
	}
	var out []hcn.PortMappingPolicy
	for _, p := range policies {
		if ep := hcn.ProvidedBy(p, others); ep != nil {
			log.WithFields(logrus.Fields{"mapping": p.String(), "provided_by": ep.Name, "provider_endpoint": ep.ID}).
				Info("host port already mapped by another endpoint of the pod's namespace; skipped")
			continue
		}
		out = append(out, p)
	}
	return out, nil
}

// ErrHyperV: the pod is Hyper-V isolated; host ports cannot be added to it.
// It is an invalid request (final).
var ErrHyperV = fmt.Errorf("%w: Hyper-V isolated pod", ErrInvalidPod)

// hyperV says why the sandbox is Hyper-V isolated, "" when it is not.
func (c *Core) hyperV(r *resolved) string {
	if r.sb.HyperV != "" {
		return r.sb.HyperV
	}
	if h := r.pod.RuntimeHandler; h != "" && slices.Contains(c.opt.HyperVHandlers, h) {
		return "runtime handler " + h
	}
	return ""
}

// errHolderBusy: a conflict whose holder is being started or stopped right
// now; retrying decides it (a stop frees the port).
var errHolderBusy = errors.New("the pod holding the host port is being started or stopped")

// errHolderUnknown: whether a conflict's holder still runs could not be
// told (containerd or HNS failed while asked); retried a bounded number of
// times, like an unclassified HNS failure, rather than taken for a conflict.
var errHolderUnknown = errors.New("could not tell whether the pod holding the host port still runs")

type reclaimResult int

const (
	holderLive    reclaimResult = iota // a real conflict
	reclaimed                          // the holder was gone: its ports are free now
	holderBusy                         // the holder's work runs now: undecided
	holderUnknown                      // asking about the holder failed: undecided
)

// reclaim frees the host ports of a conflict's holder when the holder is no
// longer running (an orphan left by a pod that stopped while the plugin was
// down, not yet removed by the reconcile): its endpoint is removed at once,
// so the new pod need not wait for the resync. A holder whose own work runs
// now is left to it.
func (c *Core) reclaim(ctx context.Context, err error) (reclaimResult, error) {
	var ce *ConflictError
	if !errors.As(err, &ce) {
		return holderLive, nil
	}
	unlock, ok := c.locks.tryLock(ce.HolderID)
	if !ok {
		return holderBusy, nil
	}
	defer unlock()
	holder := Pod{ID: ce.HolderID}
	if !c.stopped.has(ce.HolderID) {
		sb, serr := c.store.Sandbox(ctx, ce.HolderID)
		switch {
		case errors.Is(serr, ErrSandboxNotFound):
		case serr != nil:
			return holderUnknown, serr
		default:
			live, lerr := c.live(ctx, sb)
			if lerr != nil {
				return holderUnknown, lerr
			}
			if live {
				return holderLive, nil
			}
		}
	}
	if _, rerr := c.removeLocked(ctx, holder); rerr != nil {
		c.PodLog(holder).WithError(rerr).Warn("could not free the host ports of a sandbox that is gone")
		return holderUnknown, rerr
	}
	c.PodLog(holder).Info("freed the host ports of a sandbox that is gone, for a new pod")
	return reclaimed, nil
}

// StartPod is the runtime's RunPodSandbox: it gives the pod its endpoint
// without holding the runtime up for longer than the deadline. Work that
// needs no HCN answer (parsing, admission, conflicts) fails the pod at once.
// When HCN is slower than the deadline: fail-open returns nil and the work
// goes on (retrying transient failures until the endpoint exists or the pod
// is gone); fail-closed returns ErrDeadline and the start is replaced by a
// stop, which rolls back whatever the work created.
func (c *Core) StartPod(ctx context.Context, p Pod) error {
	// Decided without I/O (no mapping, or a bad annotation): answer at once,
	// with no queued work, while the runtime holds its node-wide lock.
	p, ok, err := c.fastPath(p)
	if !ok {
		c.opt.Observer.Operation("start", Classify(err))
		c.report(&resolved{pod: p}, err)
		return err
	}
	dctx, cancel := context.WithTimeout(ctx, c.opt.Deadline)
	defer cancel()
	_, err, answered := c.await(dctx, workStart, p, false)
	if answered {
		c.opt.Observer.Operation("start", Classify(err))
		return err
	}
	c.opt.Observer.Operation("start", ClassDeadline)
	log := c.PodLog(p).WithField("deadline", c.opt.Deadline.String())
	if c.opt.FailOpen {
		log.Warn("HCN is slower than the deadline: the pod proceeds, its endpoint is completed in the background (fail-open)")
		return nil
	}
	// the runtime is told the pod failed: leave nothing behind
	c.stopped.add(p.ID)
	c.submit(workStop, p, nil)
	log.Warn("HCN is slower than the deadline: the pod fails, its endpoint is rolled back (fail-closed)")
	return fmt.Errorf("pod %s: %w (%s, failure_policy fail-closed); what was started is rolled back", p, ErrDeadline, c.opt.Deadline)
}

// Started asks for the endpoint of a pod whose start was seen outside the
// runtime's request path (a containerd event): report, when set, is told
// the final result (after retries of transient failures).
func (c *Core) Started(p Pod, report func(error)) {
	c.submit(workStart, p, reporter(report))
}

func reporter(report func(error)) *waiter {
	if report == nil {
		return nil
	}
	return &waiter{done: func(_ Change, err error) { report(err) }}
}

func (c *Core) stillLive(ctx context.Context, id string) bool {
	sb, err := c.store.Sandbox(ctx, id)
	if errors.Is(err, ErrSandboxNotFound) {
		return false
	}
	if err != nil {
		return true // cannot tell: keep trying
	}
	live, err := c.live(ctx, sb)
	return live || err != nil
}

// EnsureRetrying gives the pod its endpoint, retrying transient failures,
// and waits for the final result until ctx ends.
func (c *Core) EnsureRetrying(ctx context.Context, p Pod) error {
	_, err, _ := c.await(ctx, workStart, p, false)
	return err
}
