package plugin

import (
	"context"
	"fmt"
	"slices"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
)

// startAhead gives a started pod its endpoint with the HNS create running
// while containerd is asked for the sandbox's namespace, instead of after:
// a pod start then waits for the longer of the two calls, not their sum.
// It applies to a pod whose request alone decides its endpoint (the
// runtime's RunPodSandbox: the annotation parsed, no Kubernetes hostPort to
// read), whose host ports are free and admitted, and which has no endpoint
// yet. Anything else, and anything the lookup turns up that the endpoint was
// not made for (no Windows namespace, Hyper-V isolation, a stop meanwhile, a
// failed lookup), is left to resolveAndApply, the sequential path, with the
// early endpoint deleted first: handled is false then, and the outcome is
// the sequential path's.
func (c *Core) startAhead(ctx context.Context, p Pod) (ch Change, err error, handled bool) {
	// parsed: the fast path read the mappings from the runtime's request
	// (never for a partial pod or with Kubernetes hostPorts as an input)
	if !p.parsed || len(p.annotated) == 0 || !c.mgr.Fresh(p.ID) ||
		// would only be created to be deleted
		slices.Contains(c.opt.HyperVHandlers, p.RuntimeHandler) || c.stopped.has(p.ID) {
		return NoChange, nil, false
	}
	if c.admit(p, p.annotated) != nil {
		return NoChange, nil, false // denied on the sequential path, which says so
	}
	policies := hcn.BuildPolicies(p.annotated, c.opt.Policy)
	undo, err := c.reserve(p, policies)
	if err != nil {
		return NoChange, nil, false // conflicts are decided (and reclaimed) on the sequential path
	}
	type lookup struct {
		sb  *SandboxInfo
		err error
	}
	got := make(chan lookup, 1)
	go func() {
		sb, err := c.store.Sandbox(ctx, p.ID)
		got <- lookup{sb, err}
	}()
	ahead, ok := c.mgr.CreateAhead(ctx, p.ID, policies)
	l := <-got
	if !ok {
		undo()
		return NoChange, nil, false
	}
	r := &resolved{pod: p, sb: l.sb, known: true, mappings: p.annotated}
	if l.err != nil || r.sb.NetNS == "" || c.hyperV(r) != "" || c.stopped.has(p.ID) {
		err := ahead.Drop(ctx)
		undo()
		if err != nil {
			return NoChange, fmt.Errorf("pod %s: %w", p, err), true // transient: retried on the sequential path
		}
		return NoChange, nil, false
	}
	ep, outcome, err := ahead.Attach(ctx, r.sb.NetNS)
	if err != nil {
		undo()
		err = fmt.Errorf("pod %s: %w", p, err)
		c.report(r, err)
		return NoChange, err, true
	}
	ch = c.attached(r, ep, outcome, policies)
	c.report(r, nil)
	return ch, nil, true
}
