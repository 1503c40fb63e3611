package plugin

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
	"github.com/sirupsen/logrus"
)

// live reports whether a sandbox is running, judged from containerd (its
// task, when there is one, is not stopped) and HCN (its namespace still
// exists). A sandbox without a Windows namespace is not live for us.
func (c *Core) live(ctx context.Context, sb *SandboxInfo) (bool, error) {
	if sb.NetNS == "" {
		return false, nil
	}
	state, err := c.store.TaskState(ctx, sb.ID)
	if err != nil {
		return false, err
	}
	if state == TaskStopped {
		return false, nil
	}
	return c.mgr.NamespaceExists(ctx, sb.NetNS)
}

// Summary counts what a reconcile did.
type Summary struct {
	Created, Deleted, Unchanged, Failed int
	Errors                              []error
}

// Log writes the summary line of a reconcile (what: synchronize, resync)
// and one warning per sandbox that failed.
func (s Summary) Log(log *logrus.Entry, what string) {
	l := log.WithFields(logrus.Fields{"created": s.Created, "deleted": s.Deleted, "unchanged": s.Unchanged, "failed": s.Failed})
	for _, err := range s.Errors {
		l.WithError(err).Warn(what + ": a sandbox could not be reconciled")
	}
	l.Info(what + " done")
}

func (s *Summary) add(r Change, err error) {
	switch {
	case err != nil:
		s.Failed++
		s.Errors = append(s.Errors, err)
	case r == Built:
		s.Created++
	case r == Removed:
		s.Deleted++
	case r == Kept:
		s.Unchanged++
	}
}

// Reconcile converges HCN on the given pods and on every endpoint of ours:
// live pods with mappings get their endpoint, stopped or vanished pods lose
// theirs, and endpoints whose sandbox is gone are deleted. Endpoints of
// sandboxes not in pods are treated as partial pods (their request is read
// from containerd).
func (c *Core) Reconcile(ctx context.Context, pods []Pod) (Summary, error) {
	owned, err := c.mgr.Owned(ctx)
	if err != nil {
		return Summary{}, err
	}
	c.adoptPorts(owned)
	known := make(map[string]bool, len(pods)+len(owned))
	jobs := make([]Pod, 0, len(pods)+len(owned))
	for _, p := range pods {
		if !known[p.ID] {
			known[p.ID] = true
			jobs = append(jobs, p)
		}
	}
	believed := append(c.ports.ids(), c.stopped.ids()...)
	believed = append(believed, c.mgr.KnownIDs()...)
	for _, ep := range owned {
		id, _ := c.mgr.SandboxID(ep.Name)
		believed = append(believed, id)
	}
	// Also what we only believe in: a sandbox holding ports in the index,
	// known to the manager or stopped, but no longer listed by containerd or
	// HNS (an endpoint deleted behind our back, a sandbox gone without a
	// stop event). Visiting it corrects the index and the cache.
	for _, id := range believed {
		if !known[id] {
			known[id] = true
			jobs = append(jobs, Pod{ID: id, Partial: true})
		}
	}
	// Through the work queue: a sandbox with a start or stop pending keeps
	// it (reconcile is the weakest request), and the first attempt's result
	// is counted here while retries go on in the queue.
	var (
		mu  sync.Mutex
		sum Summary
		wg  sync.WaitGroup
	)
	wg.Add(len(jobs))
	for _, p := range jobs {
		c.submit(workReconcile, p, &waiter{first: true, done: func(r Change, err error) {
			mu.Lock()
			sum.add(r, err)
			mu.Unlock()
			wg.Done()
		}})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		return Summary{}, ctx.Err()
	}
	mu.Lock()
	defer mu.Unlock()
	return sum, nil
}

// ReconcileAll reconciles every sandbox containerd knows and every endpoint
// of ours: the periodic resync and the repair after missed events.
func (c *Core) ReconcileAll(ctx context.Context) (Summary, error) {
	ids, err := c.store.ListSandboxes(ctx)
	if err != nil {
		return Summary{}, err
	}
	pods := make([]Pod, 0, len(ids))
	for _, id := range ids {
		pods = append(pods, Pod{ID: id, Partial: true})
	}
	return c.Reconcile(ctx, pods)
}

func (c *Core) reconcileOne(ctx context.Context, p Pod) (Change, error) {
	unlock := c.locks.lock(p.ID)
	defer unlock()
	r, err := c.resolve(ctx, p)
	if errors.Is(err, ErrSandboxNotFound) {
		ch, rerr := c.removeLocked(ctx, p)
		if rerr == nil {
			c.stopped.forget(p.ID) // containerd forgot it: no event can name it again
		}
		return ch, rerr
	}
	if r == nil {
		return NoChange, err
	}
	live, lerr := c.live(ctx, r.sb)
	switch {
	case lerr != nil:
		return NoChange, fmt.Errorf("pod %s: deciding whether the sandbox is live: %w", p, lerr)
	case !live:
		c.stopped.add(p.ID)
		return c.removeLocked(ctx, r.pod)
	case errors.Is(err, ErrNotSandbox):
		return NoChange, nil // not ours to decide
	case err != nil:
		return NoChange, err // an invalid request: reported, nothing changed
	case !r.known:
		return NoChange, nil // live, but its request is unknown here
	case len(r.mappings) == 0:
		return c.removeLocked(ctx, r.pod)
	}
	return c.apply(ctx, r)
}

func (c *Core) adoptPorts(owned []hcn.Endpoint) {
	for _, ep := range owned {
		if id, ok := c.mgr.SandboxID(ep.Name); ok {
			c.ports.adopt(id, ep.PortMappings)
		}
	}
}

// LoadPorts rebuilds the host-port index from the endpoints HCN holds (at
// start, so conflicts with pods started before a restart are caught).
func (c *Core) LoadPorts(ctx context.Context) error {
	owned, err := c.mgr.Owned(ctx)
	if err != nil {
		return err
	}
	c.adoptPorts(owned)
	return nil
}
