package plugin

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
)

// Remove deletes the sandbox's endpoints: the sandbox stopped. It needs only
// the sandbox ID, works after containerd forgot the sandbox, and treats
// "already gone" as success. From then on nothing re-creates the endpoint,
// not even a reconcile that read the sandbox as running before the stop.
func (c *Core) Remove(ctx context.Context, p Pod) (Change, error) {
	unlock := c.locks.lock(p.ID)
	defer unlock()
	c.stopped.add(p.ID)
	return c.removeLocked(ctx, p)
}

// stopSet remembers sandboxes that stopped. CRI never starts a stopped
// sandbox again (a new sandbox has a new ID), so a stop is final: a start or
// reconcile that began before it must not re-create the endpoint. An entry
// goes when containerd no longer has the sandbox.
type stopSet struct {
	mu sync.Mutex
	m  map[string]struct{}
}

func (s *stopSet) add(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[string]struct{}{}
	}
	s.m[id] = struct{}{}
}

func (s *stopSet) has(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.m[id]
	return ok
}

func (s *stopSet) forget(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, id)
}

func (s *stopSet) ids() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Collect(maps.Keys(s.m))
}

func (c *Core) removeLocked(ctx context.Context, p Pod) (Change, error) {
	n, err := c.mgr.Remove(ctx, p.ID)
	if err != nil {
		return NoChange, fmt.Errorf("pod %s: %w", p, err)
	}
	c.ports.release(p.ID)
	if n == 0 {
		return NoChange, nil
	}
	c.PodLog(p).WithField("endpoints", n).Info("endpoint removed")
	return Removed, nil
}

// StopPod is the runtime's StopPodSandbox/RemovePodSandbox: the pod's
// pending start, if any, is replaced by the removal, and StopPod waits for
// it at most the deadline. Removal trouble never fails the runtime's
// request: transient failures are retried, and the resync removes what is
// left.
func (c *Core) StopPod(ctx context.Context, p Pod) {
	dctx, cancel := context.WithTimeout(ctx, c.opt.Deadline)
	defer cancel()
	_, err, answered := c.await(dctx, workStop, p, false)
	switch {
	case answered:
		c.opt.Observer.Operation("stop", Classify(err))
		if err != nil {
			c.PodLog(p).WithError(err).Error("endpoint not removed; the resync will retry")
		}
	case ctx.Err() == nil:
		c.opt.Observer.Operation("stop", ClassDeadline)
		c.PodLog(p).Warn("HCN is slower than the deadline: the endpoint is removed in the background")
	}
}

// Stopped asks for the removal of a pod whose stop was seen outside the
// runtime's request path (a containerd event); report, when set, is told
// the final result. With mayBeContainer, the ID may name an application
// container (a task event): then nothing is done if containerd still tells
// it is not a sandbox.
func (c *Core) Stopped(p Pod, mayBeContainer bool, report func(error)) {
	p.mayBeContainer = mayBeContainer
	c.submit(workStop, p, reporter(report))
}

// stopNow is one attempt of a stop.
func (c *Core) stopNow(ctx context.Context, p Pod) (Change, error) {
	if p.mayBeContainer {
		if sb, err := c.store.Sandbox(ctx, p.ID); err == nil && !sb.IsSandbox {
			return NoChange, ErrNotSandbox
		}
	}
	return c.Remove(ctx, p)
}
