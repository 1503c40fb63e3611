package hcn

import (
	"context"
	"time"
)

// ObserveFunc receives the duration and outcome of one HNS call.
type ObserveFunc func(call string, d time.Duration, err error)

// Instrumented reports every call of svc to observe (metrics), keeping this
// package free of any metrics library.
func Instrumented(svc Service, observe ObserveFunc) Service {
	return &instrumented{svc: svc, observe: observe}
}

type instrumented struct {
	svc     Service
	observe ObserveFunc
}

func timed[T any](i *instrumented, call string, fn func() (T, error)) (T, error) {
	start := time.Now()
	v, err := fn()
	i.observe(call, time.Since(start), err)
	return v, err
}

func (i *instrumented) GetNetworkByName(ctx context.Context, name string) (*Network, error) {
	return timed(i, "GetNetworkByName", func() (*Network, error) { return i.svc.GetNetworkByName(ctx, name) })
}

func (i *instrumented) CreateNetwork(ctx context.Context, spec NetworkSpec) (*Network, error) {
	return timed(i, "CreateNetwork", func() (*Network, error) { return i.svc.CreateNetwork(ctx, spec) })
}

func (i *instrumented) CreateEndpoint(ctx context.Context, spec EndpointSpec) (*Endpoint, error) {
	return timed(i, "CreateEndpoint", func() (*Endpoint, error) { return i.svc.CreateEndpoint(ctx, spec) })
}

func (i *instrumented) ListEndpointsByName(ctx context.Context, name string) ([]Endpoint, error) {
	return timed(i, "ListEndpointsByName", func() ([]Endpoint, error) { return i.svc.ListEndpointsByName(ctx, name) })
}

func (i *instrumented) ListEndpoints(ctx context.Context) ([]Endpoint, error) {
	return timed(i, "ListEndpoints", func() ([]Endpoint, error) { return i.svc.ListEndpoints(ctx) })
}

func (i *instrumented) DeleteEndpoint(ctx context.Context, id string) error {
	_, err := timed(i, "DeleteEndpoint", func() (none, error) { return none{}, i.svc.DeleteEndpoint(ctx, id) })
	return err
}

func (i *instrumented) AddNamespaceEndpoint(ctx context.Context, ns, ep string) error {
	_, err := timed(i, "AddNamespaceEndpoint", func() (none, error) { return none{}, i.svc.AddNamespaceEndpoint(ctx, ns, ep) })
	return err
}

func (i *instrumented) RemoveNamespaceEndpoint(ctx context.Context, ns, ep string) error {
	_, err := timed(i, "RemoveNamespaceEndpoint", func() (none, error) { return none{}, i.svc.RemoveNamespaceEndpoint(ctx, ns, ep) })
	return err
}

func (i *instrumented) GetNamespace(ctx context.Context, id string) (*Namespace, error) {
	return timed(i, "GetNamespace", func() (*Namespace, error) { return i.svc.GetNamespace(ctx, id) })
}
