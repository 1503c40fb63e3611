package plugin

import (
	"context"
	"fmt"
	"sync"
	"time"
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
	out := make([]string, 0, len(s.m))
	for id := range s.m {
		out = append(out, id)
	}
	return out
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

// StopPod is the runtime's StopPodSandbox/RemovePodSandbox: it cancels a
// start still retrying and removes the endpoint, waiting at most the
// deadline. Removal trouble never fails the runtime's request: what is left
// is retried by the resync.
func (c *Core) StopPod(ctx context.Context, p Pod) {
	c.pending.cancel(p.ID)
	done := make(chan error, 1)
	c.bgWork.Add(1)
	go func() {
		defer c.bgWork.Done()
		rctx, cancel := context.WithTimeout(context.WithoutCancel(c.bg), time.Minute)
		defer cancel()
		_, err := c.Remove(rctx, p)
		if err != nil {
			c.PodLog(p).WithError(err).Error("endpoint not removed; the resync will retry")
		}
		done <- err
	}()
	timer := time.NewTimer(c.opt.Deadline)
	defer timer.Stop()
	select {
	case err := <-done:
		c.opt.Observer.Operation("stop", Classify(err))
	case <-timer.C:
		c.opt.Observer.Operation("stop", ClassDeadline)
		c.PodLog(p).Warn("HCN is slower than the deadline: the endpoint is removed in the background")
	case <-ctx.Done():
	}
}
