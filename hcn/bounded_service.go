package hcn

import (
	"context"
	"time"
)

// Bounded wraps a Service so that every call gives up after timeout (or
// when its context ends, if sooner). A call that gives up leaks no
// goroutine; what it creates late is an endpoint of ours by name, which the
// next Ensure or the reconciler removes.
func Bounded(svc Service, timeout time.Duration) Service {
	return &bounded{svc: svc, timeout: timeout}
}

type bounded struct {
	svc     Service
	timeout time.Duration
}

func boundedCall[T any](b *bounded, ctx context.Context, what string, fn func(ctx context.Context) (T, error)) (T, error) {
	ctx, cancel := context.WithTimeout(ctx, b.timeout)
	defer cancel()
	return callBounded(ctx, what, func() (T, error) { return fn(ctx) })
}

type none struct{}

func (b *bounded) GetNetworkByName(ctx context.Context, name string) (*Network, error) {
	return boundedCall(b, ctx, "GetNetworkByName", func(ctx context.Context) (*Network, error) { return b.svc.GetNetworkByName(ctx, name) })
}

func (b *bounded) CreateNetwork(ctx context.Context, spec NetworkSpec) (*Network, error) {
	return boundedCall(b, ctx, "CreateNetwork", func(ctx context.Context) (*Network, error) { return b.svc.CreateNetwork(ctx, spec) })
}

func (b *bounded) CreateEndpoint(ctx context.Context, spec EndpointSpec) (*Endpoint, error) {
	return boundedCall(b, ctx, "CreateEndpoint", func(ctx context.Context) (*Endpoint, error) { return b.svc.CreateEndpoint(ctx, spec) })
}

func (b *bounded) ListEndpointsByName(ctx context.Context, name string) ([]Endpoint, error) {
	return boundedCall(b, ctx, "ListEndpointsByName", func(ctx context.Context) ([]Endpoint, error) { return b.svc.ListEndpointsByName(ctx, name) })
}

func (b *bounded) ListEndpoints(ctx context.Context) ([]Endpoint, error) {
	return boundedCall(b, ctx, "ListEndpoints", func(ctx context.Context) ([]Endpoint, error) { return b.svc.ListEndpoints(ctx) })
}

func (b *bounded) DeleteEndpoint(ctx context.Context, id string) error {
	_, err := boundedCall(b, ctx, "DeleteEndpoint", func(ctx context.Context) (none, error) { return none{}, b.svc.DeleteEndpoint(ctx, id) })
	return err
}

func (b *bounded) AddNamespaceEndpoint(ctx context.Context, ns, ep string) error {
	_, err := boundedCall(b, ctx, "AddNamespaceEndpoint", func(ctx context.Context) (none, error) {
		return none{}, b.svc.AddNamespaceEndpoint(ctx, ns, ep)
	})
	return err
}

func (b *bounded) RemoveNamespaceEndpoint(ctx context.Context, ns, ep string) error {
	_, err := boundedCall(b, ctx, "RemoveNamespaceEndpoint", func(ctx context.Context) (none, error) {
		return none{}, b.svc.RemoveNamespaceEndpoint(ctx, ns, ep)
	})
	return err
}

func (b *bounded) GetNamespace(ctx context.Context, id string) (*Namespace, error) {
	return boundedCall(b, ctx, "GetNamespace", func(ctx context.Context) (*Namespace, error) { return b.svc.GetNamespace(ctx, id) })
}
