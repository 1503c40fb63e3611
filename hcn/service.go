package hcn

import "context"

// Service is the thin seam over HNS: one method per HNS call the plugin
// makes, in the project's own types. Implementations: the hcsshim adapter
// (service_windows.go) and the simulator (package hcnsim). Every method maps
// HNS failures onto the typed errors of this package, and honours its
// context: it returns when ctx ends even if HNS has not answered.
type Service interface {
	// GetNetworkByName returns ErrNotFound when no network has that name.
	GetNetworkByName(ctx context.Context, name string) (*Network, error)
	// ListNetworks lists every network of the node.
	ListNetworks(ctx context.Context) ([]Network, error)
	CreateNetwork(ctx context.Context, spec NetworkSpec) (*Network, error)
	// CreateEndpoint creates an unattached endpoint; a preset Namespace is
	// ErrInvalid, a host port held by another endpoint ErrPortInUse.
	CreateEndpoint(ctx context.Context, spec EndpointSpec) (*Endpoint, error)
	// ListEndpointsByName returns every endpoint with that name (HNS does not
	// enforce unique names), possibly none.
	ListEndpointsByName(ctx context.Context, name string) ([]Endpoint, error)
	// ListEndpoints lists every endpoint of the node; ListEndpointsOfNetwork
	// those of one network (HNS filters, so fewer are opened). As through
	// hcsshim, a listing opens each endpoint in turn: it costs one HNS call
	// per endpoint, and an endpoint deleted meanwhile fails it with
	// ErrNotFound.
	ListEndpoints(ctx context.Context) ([]Endpoint, error)
	ListEndpointsOfNetwork(ctx context.Context, networkID string) ([]Endpoint, error)
	// GetEndpoint returns ErrNotFound when no endpoint has that ID.
	GetEndpoint(ctx context.Context, id string) (*Endpoint, error)
	DeleteEndpoint(ctx context.Context, id string) error
	AddNamespaceEndpoint(ctx context.Context, namespaceID GUID, endpointID string) error
	RemoveNamespaceEndpoint(ctx context.Context, namespaceID GUID, endpointID string) error
	GetNamespace(ctx context.Context, id GUID) (*Namespace, error)
}

// Node is what a check of the node asks HNS beyond Service: its version,
// and throwaway namespaces for a self-test. Implementations: the hcsshim
// adapter, the simulator and its client.
type Node interface {
	Service
	// Version is HNS's version as "major.minor".
	Version(ctx context.Context) (string, error)
	// NewNamespace creates a namespace as containerd creates a pod's (no
	// type; never HostDefault, the host's own compartment).
	NewNamespace(ctx context.Context) (GUID, error)
	RemoveNamespace(ctx context.Context, id GUID) error
}
