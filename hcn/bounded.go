package hcn

import (
	"context"
	"fmt"
)

// callBounded runs fn, which cannot be cancelled (an HNS call), and returns
// its result or ctx's error, whichever comes first. The result channel is
// buffered so a call that finishes after we gave up does not leak its
// goroutine; what such a late call created is found and removed by the
// reconciler (our endpoints are recognised by name).
func callBounded[T any](ctx context.Context, what string, fn func() (T, error)) (T, error) {
	type result struct {
		v   T
		err error
	}
	ch := make(chan result, 1)
	go func() {
		v, err := fn()
		ch <- result{v, err}
	}()
	select {
	case r := <-ch:
		return r.v, r.err
	case <-ctx.Done():
		var zero T
		return zero, fmt.Errorf("%s: gave up waiting for HNS: %w", what, ctx.Err())
	}
}
