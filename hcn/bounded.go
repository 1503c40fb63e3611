package hcn

import (
	"context"
	"fmt"
)

// callBounded runs fn, which cannot be cancelled (an HNS call), and returns
// its result or ctx's error, whichever comes first. It starts nothing for a
// caller whose ctx has already ended, and waits for a slot of lim (nil: no
// limit). A call given up on keeps running inside HNS: its goroutine stays
// parked until HNS answers and keeps its slot until then, so a hung HNS
// holds at most lim's slots; the result channel is buffered so the late
// answer does not block it. What such a late call creates is an endpoint of
// ours by name, which the next Ensure adopts or the reconciler removes.
func callBounded[T any](ctx context.Context, lim *Limiter, what string, fn func() (T, error)) (T, error) {
	var zero T
	if lim == nil {
		lim = unlimited
	}
	if err := lim.acquire(ctx, what); err != nil {
		return zero, err
	}
	type result struct {
		v   T
		err error
	}
	ch := make(chan result, 1)
	go func() {
		defer lim.release()
		v, err := fn()
		ch <- result{v, err}
	}()
	select {
	case r := <-ch:
		return r.v, r.err
	case <-ctx.Done():
		return zero, fmt.Errorf("%s: %w: %w", what, ErrTimeout, ctx.Err())
	}
}

// unlimited is a limiter nobody waits for.
var unlimited = NewLimiter(1 << 20)
