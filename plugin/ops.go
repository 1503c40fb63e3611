package plugin

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/admission"
)

// ErrDeadline: HCN did not finish a fail-closed pod start in time.
var ErrDeadline = errors.New("HCN did not finish within the deadline")

// Transient reports whether retrying may help: HNS unreachable, a call that
// timed out, an unclassified HNS failure. A bad or denied request, a port
// held by someone else, or a sandbox that is gone is final.
func Transient(err error) bool {
	if err == nil {
		return false
	}
	for _, final := range []error{ErrInvalidPod, admission.ErrDenied, ErrPortConflict, ErrSandboxNotFound, errNotSandbox,
		hcn.ErrNotFound, hcn.ErrPortInUse, hcn.ErrInvalid, hcn.ErrAlreadyAttached, hcn.ErrInUse} {
		if errors.Is(err, final) {
			return false
		}
	}
	return true
}

// pendingOps tracks background start work per sandbox, so that a stop can
// cancel a start that is still retrying.
type pendingOps struct {
	mu sync.Mutex
	m  map[string]*pendingOp
}

type pendingOp struct{ cancel context.CancelFunc }

// set registers a start, cancelling an older one of the same sandbox.
func (p *pendingOps) set(id string, cancel context.CancelFunc) *pendingOp {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.m == nil {
		p.m = map[string]*pendingOp{}
	}
	if old := p.m[id]; old != nil {
		old.cancel()
	}
	op := &pendingOp{cancel: cancel}
	p.m[id] = op
	return op
}

func (p *pendingOps) cancel(id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if op := p.m[id]; op != nil {
		op.cancel()
		delete(p.m, id)
	}
}

// done forgets op unless a newer start replaced it.
func (p *pendingOps) done(id string, op *pendingOp) {
	p.mu.Lock()
	defer p.mu.Unlock()
	op.cancel()
	if p.m[id] == op {
		delete(p.m, id)
	}
}

func (p *pendingOps) size() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.m)
}

// op states, for the race between the deadline and completion.
const (
	opRunning int32 = iota
	opDone
	opAbandoned
)

// StartPod is the runtime's RunPodSandbox: it gives the pod its endpoint
// without holding the runtime up for longer than the deadline. Work that
// needs no HCN answer (parsing, admission, conflicts) fails the pod at once.
// When HCN is slower than the deadline: fail-open returns nil and keeps
// working (retrying transient failures until the endpoint exists or the pod
// is gone); fail-closed returns ErrDeadline and rolls back whatever the work
// still creates.
func (c *Core) StartPod(ctx context.Context, p Pod) error {
	// Decided without I/O (no mapping, or a bad annotation): answer at once,
	// with no background work, while the runtime holds its node-wide lock.
	p, ok, err := c.needsWork(p)
	if !ok {
		c.opt.Observer.Operation("start", ResultOf(err))
		return err
	}
	bg, cancel := context.WithCancel(c.bg)
	op := c.pending.set(p.ID, cancel)
	var state atomic.Int32
	done := make(chan error, 1)
	c.bgWork.Add(1)
	go func() {
		defer c.bgWork.Done()
		defer c.pending.done(p.ID, op)
		done <- c.ensureRetrying(bg, p, &state)
	}()
	timer := time.NewTimer(c.opt.Deadline)
	defer timer.Stop()
	select {
	case err := <-done:
		c.opt.Observer.Operation("start", ResultOf(err))
		return err
	case <-timer.C:
	case <-ctx.Done():
	}
	c.opt.Observer.Operation("start", ResultDeadline)
	log := c.podLog(p).WithField("deadline", c.opt.Deadline.String())
	if c.opt.FailOpen {
		log.Warn("HCN is slower than the deadline: the pod proceeds, its endpoint is completed in the background (fail-open)")
		return nil
	}
	if !state.CompareAndSwap(opRunning, opAbandoned) {
		return <-done // it finished just now
	}
	log.Warn("HCN is slower than the deadline: the pod fails, its endpoint is rolled back (fail-closed)")
	return fmt.Errorf("pod %s: %w (%s, failure_policy fail-closed); what was started is rolled back", p, ErrDeadline, c.opt.Deadline)
}

// ensureRetrying ensures the pod's endpoint, retrying transient failures
// with capped exponential backoff while the pod is live. state, when not
// nil, is shared with a StartPod that may abandon the work: then whatever
// exists is removed instead.
func (c *Core) ensureRetrying(ctx context.Context, p Pod, state *atomic.Int32) error {
	retry := newBackoff(c.opt.RetryMin, c.opt.RetryMax)
	for attempt := 1; ; attempt++ {
		// A cancelled ctx (shutdown, or a stop of this pod) ends the
		// retries, never an attempt halfway: an HNS call given up on would
		// leave what it creates late behind. Each call is bounded anyway.
		err := c.ensureAttempt(context.WithoutCancel(ctx), p, state)
		if err == nil || !Transient(err) || ctx.Err() != nil {
			return err
		}
		if state != nil && state.Load() == opAbandoned {
			return err // ensureAttempt has rolled back
		}
		c.podLog(p).WithError(err).WithFields(logrus.Fields{"attempt": attempt, "retry_in": retry.Next().String()}).
			Warn("transient HCN failure; retrying")
		if !retry.Wait(ctx) {
			return err
		}
		if !c.stillLive(ctx, p.ID) {
			c.podLog(p).Info("sandbox gone while retrying; giving up")
			return nil
		}
	}
}

// ensureAttempt is one try, under the pod's lock.
func (c *Core) ensureAttempt(ctx context.Context, p Pod, state *atomic.Int32) error {
	unlock := c.locks.lock(p.ID)
	defer unlock()
	_, err := c.ensureLocked(ctx, p)
	if state == nil {
		return err
	}
	if err == nil && state.CompareAndSwap(opRunning, opDone) {
		return nil
	}
	if state.Load() == opAbandoned {
		// the runtime was told the pod failed: leave nothing behind
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if _, rerr := c.removeLocked(rctx, p); rerr != nil {
			c.podLog(p).WithError(rerr).Error("rolling back an abandoned start failed; the resync will remove it")
		}
	}
	return err
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

// EnsureRetrying is Ensure with retries of transient failures, for sources
// that are not bound by a runtime deadline (containerd events).
func (c *Core) EnsureRetrying(ctx context.Context, p Pod) error {
	c.pending.cancel(p.ID)
	return c.ensureRetrying(ctx, p, nil)
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
			c.podLog(p).WithError(err).Error("endpoint not removed; the resync will retry")
		}
		done <- err
	}()
	timer := time.NewTimer(c.opt.Deadline)
	defer timer.Stop()
	select {
	case err := <-done:
		c.opt.Observer.Operation("stop", ResultOf(err))
	case <-timer.C:
		c.opt.Observer.Operation("stop", ResultDeadline)
		c.podLog(p).Warn("HCN is slower than the deadline: the endpoint is removed in the background")
	case <-ctx.Done():
	}
}
