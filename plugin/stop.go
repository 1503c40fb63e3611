package plugin

import (
	"context"
	"fmt"
	"time"
)

// Remove deletes the sandbox's endpoints. It needs only the sandbox ID, works
// after containerd forgot the sandbox, and treats "already gone" as success.
func (c *Core) Remove(ctx context.Context, p Pod) (Change, error) {
	unlock := c.locks.lock(p.ID)
	defer unlock()
	return c.removeLocked(ctx, p)
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
