// Package backoff is the plugin's one retry rule, a capped, jittered
// exponential delay: Backoff for its retry loops (NRI reconnects,
// containerd resubscriptions, the namespace watch, HNS at boot),
// apimachinery's wait.Backoff waited out under a context; QueueLimiter for
// its work queues (the controller's, the Kubernetes reporter's), the same
// curve as a client-go rate limiter, with an overall rate.
package backoff

import (
	"context"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/config"
	"math"
	"sync"
	"time"

	"golang.org/x/time/rate"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/workqueue"
)

// Jitter spreads each delay d over [d, d·(1+Jitter)), so that many retries
// started by one hiccup do not come back in one wave.
const Jitter = config.RetryJitter

// Backoff is a capped exponential delay: min, 2·min, 4·min … up to max.
type Backoff struct {
	initial, cur wait.Backoff
}

// New returns a backoff starting at min, capped at max.
func New(min, max time.Duration) *Backoff {
	b := wait.Backoff{Duration: min, Factor: 2, Jitter: Jitter, Steps: math.MaxInt32, Cap: max}
	return &Backoff{initial: b, cur: b}
}

// Next is the delay (before jitter) the next wait will take.
func (b *Backoff) Next() time.Duration { return b.cur.Duration }

// Reset starts over from min (the thing worked for a while).
func (b *Backoff) Reset() { b.cur = b.initial }

// Step is the next delay, jittered, and doubles it: for a caller that
// waits on something else too.
func (b *Backoff) Step() time.Duration { return b.cur.Step() }

// Wait sleeps the next delay, jittered, and doubles it; false when ctx
// ended first.
func (b *Backoff) Wait(ctx context.Context) bool {
	t := time.NewTimer(b.Step())
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// QueueLimiter is the same rule for a work queue's retries (client-go's
// rate limiter): each key waits the capped, jittered exponential delay of
// its failures since it last succeeded (Forget), and all keys together are
// held to config.RetriesPerSecond (burst config.RetryBurst), as client-go's
// own controllers hold theirs, so that one hiccup failing every pod does
// not come back as a storm of retries.
func QueueLimiter(min, max time.Duration) workqueue.TypedRateLimiter[string] {
	return workqueue.NewTypedMaxOfRateLimiter[string](
		&itemLimiter{min: min, max: max, failures: map[string]int{}},
		&workqueue.TypedBucketRateLimiter[string]{Limiter: rate.NewLimiter(rate.Limit(config.RetriesPerSecond), config.RetryBurst)},
	)
}

// itemLimiter is a key's backoff: min doubling to max, jittered as Wait
// jitters.
type itemLimiter struct {
	min, max time.Duration
	mu       sync.Mutex
	failures map[string]int
}

func (l *itemLimiter) When(key string) time.Duration {
	l.mu.Lock()
	n := l.failures[key]
	l.failures[key] = n + 1
	l.mu.Unlock()
	d := l.min
	for range n {
		if d >= l.max {
			break
		}
		d *= 2
	}
	return wait.Jitter(min(d, l.max), Jitter)
}

func (l *itemLimiter) Forget(key string) {
	l.mu.Lock()
	delete(l.failures, key)
	l.mu.Unlock()
}

func (l *itemLimiter) NumRequeues(key string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.failures[key]
}
