package plugin

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
	"github.com/sirupsen/logrus"
	"k8s.io/client-go/util/workqueue"
)

// ErrClosed: the core was closed before the work ran.
var ErrClosed = errors.New("plugin shutting down")

// workKind is what should happen to a sandbox, in priority order: a request
// of a higher kind replaces a pending one of a lower kind.
type workKind int

const (
	workReconcile workKind = iota // converge on what containerd and HNS say
	workStart                     // the pod started: give it its endpoint
	workStop                      // the pod stopped: remove it, for good
)

// waiter is told the result of a sandbox's work: of its first attempt, or
// of the final one (after the retries of transient failures).
type waiter struct {
	first bool
	done  func(Change, error)
}

// work is the pending request for one sandbox.
type work struct {
	kind     workKind
	pod      Pod
	attempts int
	waiters  []waiter
}

// workQueue is the one queue all pod work goes through: NRI requests,
// containerd events, reconciles and retries. It is keyed by sandbox ID, so
// requests for one sandbox are merged (the latest of the highest kind wins)
// and never run at the same time, while different sandboxes run in
// parallel on a bounded number of workers. Retries of transient failures
// wait a jittered, capped exponential delay per sandbox.
type workQueue struct {
	q       workqueue.TypedRateLimitingInterface[string]
	mu      sync.Mutex
	pending map[string]*work
	closed  bool
	workers sync.WaitGroup
}

// retryLimiter is the per-sandbox retry delay: RetryMin doubling up to
// RetryMax, spread ±20%.
type retryLimiter struct {
	c        *Core
	mu       sync.Mutex
	failures map[string]int
}

func (r *retryLimiter) When(id string) time.Duration {
	r.mu.Lock()
	n := r.failures[id]
	r.failures[id] = n + 1
	r.mu.Unlock()
	d := r.c.opt.RetryMin
	for range n {
		if d >= r.c.opt.RetryMax {
			break
		}
		d *= 2
	}
	d = min(d, r.c.opt.RetryMax)
	return time.Duration(float64(d) * (0.8 + 0.4*rand.Float64()))
}

func (r *retryLimiter) Forget(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.failures, id)
}

func (r *retryLimiter) NumRequeues(id string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.failures[id]
}

func (c *Core) startQueue(workers int) {
	c.wq.pending = map[string]*work{}
	c.wq.q = workqueue.NewTypedRateLimitingQueueWithConfig[string](&retryLimiter{c: c, failures: map[string]int{}},
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "nri-hcn-portmap"})
	for range workers {
		c.wq.workers.Go(func() {
			for {
				id, shutdown := c.wq.q.Get()
				if shutdown {
					return
				}
				c.process(id)
				c.wq.q.Done(id)
			}
		})
	}
}

// submit asks for work on a sandbox; w, if set, is told the result.
func (c *Core) submit(kind workKind, p Pod, w *waiter) {
	c.wq.mu.Lock()
	if c.wq.closed {
		c.wq.mu.Unlock()
		if w != nil {
			w.done(NoChange, ErrClosed)
		}
		return
	}
	cur := c.wq.pending[p.ID]
	switch {
	case cur == nil:
		cur = &work{kind: kind, pod: p}
		c.wq.pending[p.ID] = cur
	case kind >= cur.kind:
		cur.kind, cur.pod = kind, p
	}
	if w != nil {
		cur.waiters = append(cur.waiters, *w)
	}
	c.wq.mu.Unlock()
	c.wq.q.Add(p.ID)
}

// await submits work and waits for its result until ctx ends; answered is
// false when ctx ended first (the work goes on).
func (c *Core) await(ctx context.Context, kind workKind, p Pod, first bool) (ch Change, err error, answered bool) {
	results := make(chan result, 1)
	c.submit(kind, p, &waiter{first: first, done: func(r Change, err error) { results <- result{r, err} }})
	select {
	case r := <-results:
		return r.change, r.err, true
	case <-ctx.Done():
		return NoChange, ctx.Err(), false
	}
}

type result struct {
	change Change
	err    error
}

// process runs the pending work of one sandbox; the queue guarantees no
// other worker has the same sandbox meanwhile.
func (c *Core) process(id string) {
	c.wq.mu.Lock()
	w := c.wq.pending[id]
	delete(c.wq.pending, id)
	c.wq.mu.Unlock()
	if w == nil {
		c.wq.q.Forget(id) // a delayed retry of work already done
		return
	}
	// Attempts are never cut short (an HNS call given up on would leave
	// what it creates late behind); each HNS call is bounded anyway.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	change, err := c.run(ctx, w)
	cancel()
	w.attempts++
	if err != nil && transient(err) && w.kind != workReconcile && !c.closing() {
		if retryForever(err) || w.attempts < UnclassifiedAttempts {
			c.retry(id, w, err)
			return
		}
		c.PodLog(w.pod).WithError(err).WithField("attempts", w.attempts).
			Error("HNS keeps failing in a way the plugin does not know; giving up until the next resync")
	}
	c.wq.q.Forget(id)
	for _, wt := range w.waiters {
		wt.done(change, err)
	}
}

// UnclassifiedAttempts bounds the tries of work that fails with an HNS
// error nobody has classified: it is reported failed after that (the
// resync tries again), instead of hammering HNS forever.
const UnclassifiedAttempts = 5

// retryForever: HNS unreachable or slow, a holder busy — retried while the
// work matters, since they pass.
func retryForever(err error) bool { return hcn.Retryable(err) || errors.Is(err, errHolderBusy) }

// retry puts the work back, to run again after the sandbox's retry delay,
// unless newer work for the sandbox replaces it. Waiters of the first
// attempt get its result now.
func (c *Core) retry(id string, w *work, err error) {
	keep := w.waiters[:0]
	for _, wt := range w.waiters {
		if wt.first {
			wt.done(NoChange, err)
		} else {
			keep = append(keep, wt)
		}
	}
	w.waiters = keep
	log := c.PodLog(w.pod).WithError(err).WithFields(logrus.Fields{"attempt": w.attempts})
	c.wq.mu.Lock()
	if newer := c.wq.pending[id]; newer != nil {
		newer.waiters = append(newer.waiters, w.waiters...)
		if w.kind > newer.kind {
			newer.kind, newer.pod = w.kind, w.pod
		}
		newer.attempts = w.attempts
	} else {
		c.wq.pending[id] = w
	}
	c.wq.mu.Unlock()
	log.Warn("transient HCN failure; retrying")
	c.wq.q.AddRateLimited(id)
}

// run does one attempt of the work.
func (c *Core) run(ctx context.Context, w *work) (Change, error) {
	switch w.kind {
	case workStop:
		return c.stopNow(ctx, w.pod)
	case workStart:
		unlock := c.locks.lock(w.pod.ID)
		defer unlock()
		if w.attempts > 0 && !c.stillLive(ctx, w.pod.ID) {
			// what an earlier attempt could not delete goes with it
			c.PodLog(w.pod).Info("sandbox gone while retrying; giving up")
			return NoChange, c.dropEarly(ctx, w.pod)
		}
		if w.attempts == 0 {
			if ch, err, handled := c.startAhead(ctx, w.pod); handled {
				return ch, err
			}
		}
		return c.resolveAndApply(ctx, w.pod)
	}
	return c.reconcileOne(ctx, w.pod)
}

func (c *Core) closing() bool {
	c.wq.mu.Lock()
	defer c.wq.mu.Unlock()
	return c.wq.closed
}

// shutdownQueue stops taking work, lets the workers finish what they run,
// and tells the waiters of work that will not run.
func (c *Core) shutdownQueue() {
	c.wq.mu.Lock()
	c.wq.closed = true
	c.wq.mu.Unlock()
	c.wq.q.ShutDown()
	c.wq.workers.Wait()
	c.wq.mu.Lock()
	left := c.wq.pending
	c.wq.pending = map[string]*work{}
	c.wq.mu.Unlock()
	for _, w := range left {
		for _, wt := range w.waiters {
			wt.done(NoChange, ErrClosed)
		}
	}
}

// queued reports whether work for the sandbox waits or retries.
func (c *Core) queued(id string) bool {
	c.wq.mu.Lock()
	defer c.wq.mu.Unlock()
	return c.wq.pending[id] != nil
}
