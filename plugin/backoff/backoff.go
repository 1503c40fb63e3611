// Package backoff is the capped exponential delay shared by every retry
// loop of the plugin: NRI reconnects, containerd resubscriptions and HCN
// retries.
package backoff

import (
	"context"
	"math/rand/v2"
	"time"
)

// Backoff is a capped exponential delay: min, 2·min, 4·min … up to max.
type Backoff struct {
	min, max, next time.Duration
}

// jittered spreads d over [0.8d, 1.2d) as r goes over [0, 1).
func jittered(d time.Duration, r float64) time.Duration {
	return time.Duration(float64(d) * (0.8 + 0.4*r))
}

// New returns a backoff starting at min, capped at max.
func New(min, max time.Duration) *Backoff {
	return &Backoff{min: min, max: max, next: min}
}

// Next is the delay the next wait will take.
func (b *Backoff) Next() time.Duration { return b.next }

// Reset starts over from min (the thing worked for a while).
func (b *Backoff) Reset() { b.next = b.min }

// Wait sleeps about the next delay (±20%, so that many retries started by
// one hiccup do not come back in one wave) and doubles it; false when ctx
// ended first.
func (b *Backoff) Wait(ctx context.Context) bool {
	t := time.NewTimer(jittered(b.next, rand.Float64()))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
	}
	b.next = min(2*b.next, b.max)
	return true
}
