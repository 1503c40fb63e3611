package plugin

import (
	"context"
	"time"
)

// backoff is a capped exponential delay: min, 2·min, 4·min … up to max.
type backoff struct {
	min, max, next time.Duration
}

func newBackoff(min, max time.Duration) *backoff {
	return &backoff{min: min, max: max, next: min}
}

// Next is the delay the next wait will take.
func (b *backoff) Next() time.Duration { return b.next }

// Reset starts over from min (the thing worked for a while).
func (b *backoff) Reset() { b.next = b.min }

// Wait sleeps the next delay and doubles it; false when ctx ended first.
func (b *backoff) Wait(ctx context.Context) bool {
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
