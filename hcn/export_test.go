package hcn

import "context"

// InFlight is how many calls hold a slot of the limiter now (for tests).
func (l *Limiter) InFlight() int { return len(l.slots) }

// CallBounded is callBounded (for the tests of calls.go).
func CallBounded[T any](ctx context.Context, lim *Limiter, what string, fn func() (T, error)) (T, error) {
	return callBounded(ctx, lim, what, fn)
}
