// Package backoff is the capped exponential delay of the plugin's retry
// loops (NRI reconnects, containerd resubscriptions, the Kubernetes
// reporter, HNS at boot): apimachinery's wait.Backoff, waited out under a
// context. Retries of pod work are the controller queue's (client-go's
// rate limiter).
package backoff

import (
	"context"
	"math"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// Jitter spreads each delay d over [d, d·(1+Jitter)), so that many retries
// started by one hiccup do not come back in one wave.
const Jitter = 0.4

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

// Wait sleeps the next delay, jittered, and doubles it; false when ctx
// ended first.
func (b *Backoff) Wait(ctx context.Context) bool {
	t := time.NewTimer(b.cur.Step())
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
