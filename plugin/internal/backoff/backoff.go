// Package backoff is the capped exponential delay shared by every retry
// loop of the plugin: NRI reconnects, containerd resubscriptions and HCN
// retries.
package backoff

import (
	"context"
	"time"
)

// Backoff is a capped exponential delay: min, 2·min, 4·min … up to max.
type Backoff struct {
	min, max, next time.Duration
}

// New returns a backoff starting at min, capped at max.
func New(min, max time.Duration) *Backoff {
	return &Backoff{min: min, max: max, next: min}
}

// Next is the delay the next wait will take.
func (b *Backoff) Next() time.Duration { return b.next }

// Reset starts over from min (the thing worked for a while).
func (b *Backoff) Reset() { b.next = b.min }

// Wait sleeps the next delay and doubles it; false when ctx ended first.
func (b *Backoff) Wait(ctx context.Context) bool {
	t := time.NewTimer(b.next)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
	}
	b.next = min(2*b.next, b.max)
	return true
}
