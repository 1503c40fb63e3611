// Around every HNS call: the time limit (Bounded, callBounded), the cap of
// calls in flight (Limiter, Limited) and the metrics (Instrumented).

package hcn

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// around runs one HNS call (do) on behalf of a wrapper: it may change the
// context, time the call, or rewrite its error.
type around func(ctx context.Context, call string, do func(ctx context.Context) error) error

// wrapped applies an around function to every call of a Service.
type wrapped struct {
	svc    Service
	around around
}

// Bounded wraps a Service so that every call gives up after timeout (or
// when its context ends, if sooner) with an error wrapping ErrTimeout. Every
// Service honours its context (the Windows adapter runs each HNS call in a
// goroutine, see callBounded); what a call given up on creates late is an
// endpoint of ours by name, which the next Ensure or the reconciler removes.
func Bounded(svc Service, timeout time.Duration) Service {
	return &wrapped{svc: svc, around: func(ctx context.Context, call string, do func(context.Context) error) error {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		err := do(ctx)
		if err != nil && ctx.Err() != nil && !errors.Is(err, ErrTimeout) {
			return fmt.Errorf("%s: %w: %w", call, ErrTimeout, err)
		}
		return err
	}}
}

// ObserveFunc receives the duration and outcome of one HNS call. err is
// nil for a not-found answer: a lookup of what is not there is HNS
// answering (the plugin asks for a namespace or an endpoint that may be
// gone on purpose), not HNS failing.
type ObserveFunc func(call string, d time.Duration, err error)

// unobservedKey marks a context whose calls Instrumented does not report.
type unobservedKey struct{}

// Unobserved returns a context whose HNS calls are not reported to the
// metrics: health probes, which would skew the latency of the real work.
func Unobserved(ctx context.Context) context.Context {
	return context.WithValue(ctx, unobservedKey{}, true)
}

// Instrumented reports every call of svc to observe (metrics), keeping this
// package free of any metrics library.
func Instrumented(svc Service, observe ObserveFunc) Service {
	return &wrapped{svc: svc, around: func(ctx context.Context, call string, do func(context.Context) error) error {
		if ctx.Value(unobservedKey{}) != nil {
			return do(ctx)
		}
		start := time.Now()
		err := do(ctx)
		failed := err
		if !Failed(err) { // the table's word: an answer, not a failure
			failed = nil
		}
		observe(call, time.Since(start), failed)
		return err
	}}
}

func wrap[T any](w *wrapped, ctx context.Context, call string, fn func(ctx context.Context) (T, error)) (T, error) {
	var v T
	err := w.around(ctx, call, func(ctx context.Context) error {
		var err error
		v, err = fn(ctx)
		return err
	})
	return v, err
}

func wrapErr(w *wrapped, ctx context.Context, call string, fn func(ctx context.Context) error) error {
	return w.around(ctx, call, fn)
}

func (w *wrapped) GetNetworkByName(ctx context.Context, name string) (*Network, error) {
	return wrap(w, ctx, "GetNetworkByName", func(ctx context.Context) (*Network, error) { return w.svc.GetNetworkByName(ctx, name) })
}

func (w *wrapped) ListNetworks(ctx context.Context) ([]Network, error) {
	return wrap(w, ctx, "ListNetworks", w.svc.ListNetworks)
}

func (w *wrapped) CreateNetwork(ctx context.Context, spec NetworkSpec) (*Network, error) {
	return wrap(w, ctx, "CreateNetwork", func(ctx context.Context) (*Network, error) { return w.svc.CreateNetwork(ctx, spec) })
}

func (w *wrapped) CreateEndpoint(ctx context.Context, spec EndpointSpec) (*Endpoint, error) {
	return wrap(w, ctx, "CreateEndpoint", func(ctx context.Context) (*Endpoint, error) { return w.svc.CreateEndpoint(ctx, spec) })
}

func (w *wrapped) ListEndpointsByName(ctx context.Context, name string) ([]Endpoint, error) {
	return wrap(w, ctx, "ListEndpointsByName", func(ctx context.Context) ([]Endpoint, error) { return w.svc.ListEndpointsByName(ctx, name) })
}

func (w *wrapped) ListEndpoints(ctx context.Context) ([]Endpoint, error) {
	return wrap(w, ctx, "ListEndpoints", w.svc.ListEndpoints)
}

func (w *wrapped) ListEndpointsOfNetwork(ctx context.Context, networkID string) ([]Endpoint, error) {
	return wrap(w, ctx, "ListEndpointsOfNetwork", func(ctx context.Context) ([]Endpoint, error) { return w.svc.ListEndpointsOfNetwork(ctx, networkID) })
}

func (w *wrapped) GetEndpoint(ctx context.Context, id string) (*Endpoint, error) {
	return wrap(w, ctx, "GetEndpoint", func(ctx context.Context) (*Endpoint, error) { return w.svc.GetEndpoint(ctx, id) })
}

func (w *wrapped) DeleteEndpoint(ctx context.Context, id string) error {
	return wrapErr(w, ctx, "DeleteEndpoint", func(ctx context.Context) error { return w.svc.DeleteEndpoint(ctx, id) })
}

func (w *wrapped) AddNamespaceEndpoint(ctx context.Context, ns GUID, ep string) error {
	return wrapErr(w, ctx, "AddNamespaceEndpoint", func(ctx context.Context) error { return w.svc.AddNamespaceEndpoint(ctx, ns, ep) })
}

func (w *wrapped) RemoveNamespaceEndpoint(ctx context.Context, ns GUID, ep string) error {
	return wrapErr(w, ctx, "RemoveNamespaceEndpoint", func(ctx context.Context) error { return w.svc.RemoveNamespaceEndpoint(ctx, ns, ep) })
}

func (w *wrapped) GetNamespace(ctx context.Context, id GUID) (*Namespace, error) {
	return wrap(w, ctx, "GetNamespace", func(ctx context.Context) (*Namespace, error) { return w.svc.GetNamespace(ctx, id) })
}

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
