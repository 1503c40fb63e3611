package hcn

import (
	"context"
	"fmt"
)

// Limiter caps the HNS calls in flight. HNS serializes much of its work: a
// burst of calls beyond a few only queues inside HNS, each caller holding a
// goroutine (and, on Windows, an OS thread in a syscall). With a limiter the
// queue is ours, and a caller waits for a slot only as long as its context
// allows.
type Limiter struct{ slots chan struct{} }

// NewLimiter allows n calls at a time (n < 1: one).
func NewLimiter(n int) *Limiter { return &Limiter{slots: make(chan struct{}, max(n, 1))} }

// acquire waits for a slot until ctx ends.
func (l *Limiter) acquire(ctx context.Context, call string) error {
	if err := ctx.Err(); err != nil { // never start a call for a caller who gave up
		return fmt.Errorf("%s: %w: %w", call, ErrTimeout, err)
	}
	select {
	case l.slots <- struct{}{}:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%s: waiting for one of %d HNS call slots: %w: %w", call, cap(l.slots), ErrTimeout, ctx.Err())
	}
}

func (l *Limiter) release() { <-l.slots }

// Limited wraps a Service whose calls end when they return (the simulator)
// so that at most lim's slots run at once. The Windows adapter takes the
// limiter itself (NewWindowsService), because an HNS call it gave up on
// keeps running inside HNS and must keep its slot until HNS answers.
func Limited(svc Service, lim *Limiter) Service {
	return &wrapped{svc: svc, around: func(ctx context.Context, call string, do func(context.Context) error) error {
		if err := lim.acquire(ctx, call); err != nil {
			return err
		}
		defer lim.release()
		return do(ctx)
	}}
}
