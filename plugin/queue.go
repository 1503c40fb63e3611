package plugin

import (
	"context"
	"time"

	"github.com/sirupsen/logrus"
	"k8s.io/client-go/util/workqueue"
)

// waiter is told the outcome of a sandbox's sync: of the first attempt
// after it was added (first), or of the final one (after the retries of
// failures that pass).
type waiter struct {
	gen   uint64 // the record's generation when it was added
	first bool
	done  func(Change, error)
}

// The controller's queue is client-go's rate-limited workqueue keyed by
// sandbox ID, as in client-go's controller example: entry points only record
// what they saw and add the key; a worker takes a key, runs the one sync for
// it, and puts it back rate-limited when the sync failed in a way a retry
// can help. The workqueue never gives one key to two workers at once, and a
// key added while its sync runs is synced again afterwards, so the sync
// always sees the latest of what triggers said.

// newQueue returns the queue: each sandbox's retries wait RetryMin doubling
// up to RetryMax.
func newQueue(lim workqueue.TypedRateLimiter[string], retryMin, retryMax time.Duration) workqueue.TypedRateLimitingInterface[string] {
	if lim == nil {
		lim = workqueue.NewTypedItemExponentialFailureRateLimiter[string](retryMin, retryMax)
	}
	return workqueue.NewTypedRateLimitingQueueWithConfig(lim, workqueue.TypedRateLimitingQueueConfig[string]{Name: "nri-hcn-portmap"})
}

func (c *Core) startWorkers(n int) {
	for range n {
		c.workers.Go(func() {
			for {
				id, shutdown := c.q.Get()
				if shutdown {
					return
				}
				c.process(id)
				c.q.Done(id)
			}
		})
	}
}

// enqueue records what a trigger saw of a sandbox (fn, may be nil) and
// adds it to the queue; w, if set, is told the outcome.
func (c *Core) enqueue(id string, fn func(r *record), w *waiter) {
	if c.closing.Load() {
		if w != nil {
			w.done(NoChange, ErrClosed)
		}
		return
	}
	c.st.trigger(id, func(r *record) {
		if fn != nil {
			fn(r)
		}
		if w != nil {
			w.gen = r.gen
			r.waiters = append(r.waiters, *w)
		}
	})
	c.q.Add(id)
}

// await enqueues and waits for the outcome until ctx ends; answered is
// false when ctx ended first (the work goes on).
func (c *Core) await(ctx context.Context, id string, fn func(r *record), first bool) (ch Change, err error, answered bool) {
	results := make(chan result, 1)
	c.enqueue(id, fn, &waiter{first: first, done: func(r Change, err error) { results <- result{r, err} }})
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

// process runs one sync of a sandbox and decides, from the table of
// errors, whether the queue tries again.
func (c *Core) process(id string) {
	in, ok := c.st.begin(id)
	if !ok {
		c.q.Forget(id) // a delayed retry of work already done
		return
	}
	// A sync is never cut short (an HNS call given up on would leave what
	// it creates late behind); each HNS call is bounded anyway.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	change, err := c.sync(ctx, id, in)
	cancel()
	again := err != nil && retries(err, in.attempts+1) && !c.closing.Load()
	for _, w := range c.st.finish(id, in, again) {
		w.done(change, err)
	}
	if !again {
		if err != nil && kindOf(err).retry == retryBounded {
			c.log.WithField("sandbox", id).WithError(err).WithField("attempts", in.attempts+1).
				Error("HNS keeps failing in a way the plugin does not know; giving up until the next resync")
		}
		c.q.Forget(id)
		return
	}
	level := logrus.WarnLevel
	if kindOf(err).quietRetry {
		level = logrus.DebugLevel
	}
	c.log.WithFields(logrus.Fields{"sandbox": id, "attempt": in.attempts + 1}).WithError(err).Log(level, "sync failed; retrying")
	c.q.AddRateLimited(id)
}

// shutdownQueue stops taking work, lets the workers finish the syncs that
// run, and tells the waiters of work that will not run.
func (c *Core) shutdownQueue() {
	c.closing.Store(true)
	c.q.ShutDown()
	c.workers.Wait()
	for _, id := range c.st.ids() {
		for _, w := range c.st.finish(id, syncInput{gen: ^uint64(0)}, false) {
			w.done(NoChange, ErrClosed)
		}
	}
}

// queued reports whether a sync of the sandbox is due (a trigger it has
// not seen) or retrying.
func (c *Core) queued(id string) bool {
	c.st.mu.Lock()
	defer c.st.mu.Unlock()
	r := c.st.recs[id]
	return r != nil && (r.attempts > 0 || len(r.waiters) > 0 || r.gen > r.synced)
}
