//go:build windows

package hcn

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	hcsshim "github.com/Microsoft/hcsshim/hcn"
	"golang.org/x/sys/windows"
)

// WindowsService is the Service over the real HNS, through hcsshim's hcn
// package. Every call is bounded by its context and takes a slot of the
// limiter until HNS answers.
type WindowsService struct{ lim *Limiter }

var _ Node = WindowsService{}

// NewWindowsService checks that HNS answers and speaks the v2 API, as long
// as ctx allows, and returns the adapter; lim caps its HNS calls in flight
// (nil: no cap). HNS not answering is ErrUnavailable (try again: at boot
// it starts after services that depend on it); an HNS too old for the v2
// API is final. It asks HNS's version itself (GetGlobals) rather than
// hcsshim's V2ApiSupported, which caches its first answer, error included,
// for the life of the process: asked while HNS was still starting, it
// would say no for ever.
func NewWindowsService(ctx context.Context, lim *Limiter) (Node, error) {
	v, err := callBounded(ctx, lim, "GetGlobals", func() (hcsshim.Version, error) {
		g, err := hcsshim.GetGlobals()
		if err != nil {
			return hcsshim.Version{}, err
		}
		return g.Version, nil
	})
	if err := mapErr(err, AnyCall); errors.Is(err, ErrNotInstalled) {
		return nil, err // no HNS will come
	} else if err != nil {
		return nil, fmt.Errorf("HNS does not answer: %w: %w", ErrUnavailable, err)
	}
	if v.Major < 9 || (v.Major == 9 && v.Minor < 2) {
		return nil, fmt.Errorf("HNS %d.%d has no v2 API (it needs HNS 9.2+, Windows Server 2019 or later): %w", v.Major, v.Minor, ErrInvalid)
	}
	return WindowsService{lim: lim}, nil
}

// mapErr maps hcsshim/HNS errors onto the typed errors of this package
// with the table of HNS errors (errors.go), keeping the original in the
// chain. call says what the call was (some codes mean one thing creating
// an endpoint with host ports, another creating a network). Besides HNS's
// codes: hcsshim's own *NotFoundError types (its lookups by name), and a
// DLL that is not there (HNS not installed: the Containers feature).
func mapErr(err error, call Call) error {
	if err == nil {
		return nil
	}
	var dll *windows.DLLError
	switch {
	case errors.As(err, &dll):
		return fmt.Errorf("%w: %s cannot be loaded (install the Containers feature: Install-WindowsFeature Containers): %w", ErrNotInstalled, dll.ObjName, err)
	case hcsshim.IsNotFoundError(err):
		return fmt.Errorf("%w: %w", ErrNotFound, err)
	}
	for _, c := range AllCodes(call) {
		if hcsshim.CheckErrorWithCode(err, hcsshim.ErrorCode(c)) {
			return fmt.Errorf("%w: %w", FromCode(c, call), err)
		}
	}
	return err
}

func hnsCall[T any](ctx context.Context, lim *Limiter, what string, fn func() (T, error)) (T, error) {
	v, err := callBounded(ctx, lim, what, fn)
	return v, mapErr(err, AnyCall)
}

func toNetwork(n *hcsshim.HostComputeNetwork) *Network {
	out := &Network{ID: n.Id, Name: n.Name, Type: NetworkType(n.Type)}
	for _, ipam := range n.Ipams {
		for _, s := range ipam.Subnets {
			out.Subnets = append(out.Subnets, s.IpAddressPrefix)
			for _, r := range s.Routes {
				if r.DestinationPrefix == "0.0.0.0/0" && out.Gateway == "" {
					out.Gateway = r.NextHop
				}
			}
		}
	}
	return out
}

// toEndpoint reads back the policies we understand; others are ignored.
func toEndpoint(e *hcsshim.HostComputeEndpoint) Endpoint {
	// GUIDs as HNS spells them, canonical; the zero GUID some HNS versions
	// report for an unattached endpoint means none
	out := Endpoint{ID: CanonicalGUID(e.Id), Name: e.Name, NetworkID: CanonicalGUID(e.HostComputeNetwork),
		Namespace: ParseGUID(e.HostComputeNamespace)}
	if len(e.IpConfigurations) > 0 {
		out.IPAddress = e.IpConfigurations[0].IpAddress
	}
	for _, r := range e.Routes {
		out.Routes = append(out.Routes, Route{DestinationPrefix: r.DestinationPrefix, NextHop: r.NextHop, Metric: r.Metric})
	}
	out.DNS = DNS{Domain: e.Dns.Domain, Search: e.Dns.Search, ServerList: e.Dns.ServerList, Options: e.Dns.Options}
	for _, p := range e.Policies {
		switch p.Type {
		case hcsshim.PortMapping:
			if pm, err := DecodePortMapping(p.Settings); err == nil {
				out.PortMappings = append(out.PortMappings, pm)
			} else {
				out.Undecoded = append(out.Undecoded, err.Error())
			}
		case hcsshim.OutBoundNAT:
			out.OutboundNAT = true
		case "NAT": // a v1 NAT policy, where HNS shows it as its own kind
			if p, ok := DecodeV1NAT(p.Settings); ok {
				out.NATPolicies = append(out.NATPolicies, p)
			}
		}
	}
	SortPolicies(out.PortMappings)
	SortPolicies(out.NATPolicies)
	return out
}

// endpointPolicies returns the HNS policy list of an endpoint spec: one
// PortMapping policy per mapping and, if asked, an OutBoundNAT policy.
func endpointPolicies(spec EndpointSpec) ([]hcsshim.EndpointPolicy, error) {
	var out []hcsshim.EndpointPolicy
	for _, p := range spec.PortMappings {
		raw, err := json.Marshal(hcsshim.PortMappingPolicySetting{Protocol: uint32(p.Protocol), InternalPort: p.InternalPort,
			ExternalPort: p.ExternalPort, VIP: p.VIP, Flags: hcsshim.NatFlags(p.Flags)})
		if err != nil {
			return nil, err
		}
		out = append(out, hcsshim.EndpointPolicy{Type: hcsshim.PortMapping, Settings: raw})
	}
	if spec.OutboundNAT {
		raw, err := json.Marshal(hcsshim.OutboundNatPolicySetting{})
		if err != nil {
			return nil, err
		}
		out = append(out, hcsshim.EndpointPolicy{Type: hcsshim.OutBoundNAT, Settings: raw})
	}
	return out, nil
}

// GetNetworkByName implements Service.
func (w WindowsService) GetNetworkByName(ctx context.Context, name string) (*Network, error) {
	return hnsCall(ctx, w.lim, "GetNetworkByName", func() (*Network, error) {
		n, err := hcsshim.GetNetworkByName(name)
		if err != nil {
			return nil, err
		}
		return toNetwork(n), nil
	})
}

// ListNetworks implements Service.
func (w WindowsService) ListNetworks(ctx context.Context) ([]Network, error) {
	return hnsCall(ctx, w.lim, "ListNetworks", func() ([]Network, error) {
		ns, err := hcsshim.ListNetworks()
		if err != nil {
			return nil, err
		}
		out := make([]Network, 0, len(ns))
		for i := range ns {
			out = append(out, *toNetwork(&ns[i]))
		}
		return out, nil
	})
}

// CreateNetwork implements Service.
func (w WindowsService) CreateNetwork(ctx context.Context, spec NetworkSpec) (*Network, error) {
	n := &hcsshim.HostComputeNetwork{Name: spec.Name, Type: hcsshim.NetworkType(spec.Type), SchemaVersion: hcsshim.V2SchemaVersion()}
	if spec.Subnet != "" {
		s := hcsshim.Subnet{IpAddressPrefix: spec.Subnet}
		if spec.Gateway != "" {
			s.Routes = []hcsshim.Route{{NextHop: spec.Gateway, DestinationPrefix: "0.0.0.0/0"}}
		}
		n.Ipams = []hcsshim.Ipam{{Type: "Static", Subnets: []hcsshim.Subnet{s}}}
	}
	if spec.Adapter != "" {
		raw, err := json.Marshal(hcsshim.NetAdapterNameNetworkPolicySetting{NetworkAdapterName: spec.Adapter})
		if err != nil {
			return nil, err
		}
		n.Policies = []hcsshim.NetworkPolicy{{Type: hcsshim.NetAdapterName, Settings: raw}}
	}
	out, err := callBounded(ctx, w.lim, "CreateNetwork", func() (*Network, error) {
		created, err := n.Create()
		if err != nil {
			return nil, err
		}
		return toNetwork(created), nil
	})
	return out, mapErr(err, CreatingNetwork)
}

// CreateEndpoint implements Service.
func (w WindowsService) CreateEndpoint(ctx context.Context, spec EndpointSpec) (*Endpoint, error) {
	if spec.Namespace != "" {
		return nil, fmt.Errorf("endpoint %q: namespace must be attached after creation: %w", spec.Name, ErrInvalid)
	}
	policies, err := endpointPolicies(spec)
	if err != nil {
		return nil, err
	}
	// the pod's own DNS: HNS fills in the node's on an endpoint without any
	ep := &hcsshim.HostComputeEndpoint{Name: spec.Name, HostComputeNetwork: spec.NetworkID, Policies: policies,
		Dns:           hcsshim.Dns{Domain: spec.DNS.Domain, Search: spec.DNS.Search, ServerList: spec.DNS.ServerList, Options: spec.DNS.Options},
		SchemaVersion: hcsshim.V2SchemaVersion()}
	for _, r := range spec.Routes {
		ep.Routes = append(ep.Routes, hcsshim.Route{DestinationPrefix: r.DestinationPrefix, NextHop: r.NextHop, Metric: r.Metric})
	}
	out, err := callBounded(ctx, w.lim, "CreateEndpoint", func() (*Endpoint, error) {
		created, err := ep.Create()
		if err != nil {
			return nil, err
		}
		out := toEndpoint(created)
		return &out, nil
	})
	if len(spec.PortMappings) > 0 {
		return out, mapErr(err, ClaimingPorts)
	}
	return out, mapErr(err, AnyCall)
}

func listEndpoints(filter map[string]string) ([]Endpoint, error) {
	q := hcsshim.HostComputeQuery{SchemaVersion: hcsshim.V2SchemaVersion()}
	if filter != nil {
		raw, err := json.Marshal(filter)
		if err != nil {
			return nil, err
		}
		q.Filter = string(raw)
	}
	eps, err := hcsshim.ListEndpointsQuery(q)
	if err != nil {
		return nil, err
	}
	out := make([]Endpoint, 0, len(eps))
	for i := range eps {
		out = append(out, toEndpoint(&eps[i]))
	}
	return out, nil
}

// ListEndpointsByName implements Service.
func (w WindowsService) ListEndpointsByName(ctx context.Context, name string) ([]Endpoint, error) {
	return hnsCall(ctx, w.lim, "ListEndpointsByName", func() ([]Endpoint, error) {
		return listEndpoints(map[string]string{"Name": name})
	})
}

// ListEndpoints implements Service.
func (w WindowsService) ListEndpoints(ctx context.Context) ([]Endpoint, error) {
	return hnsCall(ctx, w.lim, "ListEndpoints", func() ([]Endpoint, error) { return listEndpoints(nil) })
}

// ListEndpointsOfNetwork implements Service: HNS filters by network
// (hcsshim's ListEndpointsOfNetwork), so only that network's endpoints are
// opened.
func (w WindowsService) ListEndpointsOfNetwork(ctx context.Context, networkID string) ([]Endpoint, error) {
	return hnsCall(ctx, w.lim, "ListEndpointsOfNetwork", func() ([]Endpoint, error) {
		eps, err := hcsshim.ListEndpointsOfNetwork(networkID)
		if err != nil {
			return nil, err
		}
		out := make([]Endpoint, 0, len(eps))
		for i := range eps {
			out = append(out, toEndpoint(&eps[i]))
		}
		return out, nil
	})
}

// GetEndpoint implements Service.
func (w WindowsService) GetEndpoint(ctx context.Context, id string) (*Endpoint, error) {
	return hnsCall(ctx, w.lim, "GetEndpoint", func() (*Endpoint, error) {
		ep, err := hcsshim.GetEndpointByID(id)
		if err != nil {
			return nil, err
		}
		out := toEndpoint(ep)
		return &out, nil
	})
}

// DeleteEndpoint implements Service.
func (w WindowsService) DeleteEndpoint(ctx context.Context, id string) error {
	_, err := hnsCall(ctx, w.lim, "DeleteEndpoint", func() (struct{}, error) {
		return struct{}{}, (&hcsshim.HostComputeEndpoint{Id: id}).Delete()
	})
	return err
}

// AddNamespaceEndpoint implements Service.
func (w WindowsService) AddNamespaceEndpoint(ctx context.Context, namespaceID GUID, endpointID string) error {
	_, err := hnsCall(ctx, w.lim, "AddNamespaceEndpoint", func() (struct{}, error) {
		return struct{}{}, hcsshim.AddNamespaceEndpoint(namespaceID.String(), endpointID)
	})
	return err
}

// RemoveNamespaceEndpoint implements Service.
func (w WindowsService) RemoveNamespaceEndpoint(ctx context.Context, namespaceID GUID, endpointID string) error {
	_, err := hnsCall(ctx, w.lim, "RemoveNamespaceEndpoint", func() (struct{}, error) {
		return struct{}{}, hcsshim.RemoveNamespaceEndpoint(namespaceID.String(), endpointID)
	})
	return err
}

// GetNamespace implements Service.
func (w WindowsService) GetNamespace(ctx context.Context, id GUID) (*Namespace, error) {
	return hnsCall(ctx, w.lim, "GetNamespace", func() (*Namespace, error) {
		// one HNS query: the endpoints are the namespace's resources
		ns, err := hcsshim.GetNamespaceByID(id.String())
		if err != nil {
			return nil, err
		}
		out := &Namespace{ID: ParseGUID(ns.Id)}
		for _, r := range ns.Resources {
			if r.Type != "Endpoint" {
				continue
			}
			var ep hcsshim.NamespaceResourceEndpoint
			if err := json.Unmarshal(r.Data, &ep); err != nil {
				return nil, fmt.Errorf("namespace %s: endpoint resource %s: %w", id, r.Data, err)
			}
			out.Endpoints = append(out.Endpoints, CanonicalGUID(ep.Id))
		}
		return out, nil
	})
}

// Version implements Node.
func (w WindowsService) Version(ctx context.Context) (string, error) {
	return hnsCall(ctx, w.lim, "Version", func() (string, error) {
		g, err := hcsshim.GetGlobals()
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("%d.%d", g.Version.Major, g.Version.Minor), nil
	})
}

// NewNamespace implements Node.
func (w WindowsService) NewNamespace(ctx context.Context) (GUID, error) {
	return hnsCall(ctx, w.lim, "NewNamespace", func() (GUID, error) {
		// as containerd creates a pod's namespace (pkg/netns/netns_windows.go:
		// no type): never HostDefault, the host's own compartment, where a
		// vNIC with a default route would change the host's networking
		ns, err := (&hcsshim.HostComputeNamespace{}).Create()
		if err != nil {
			return "", err
		}
		return ParseGUID(ns.Id), nil
	})
}

// RemoveNamespace implements Node.
func (w WindowsService) RemoveNamespace(ctx context.Context, id GUID) error {
	_, err := hnsCall(ctx, w.lim, "RemoveNamespace", func() (struct{}, error) {
		return struct{}{}, (&hcsshim.HostComputeNamespace{Id: id.String()}).Delete()
	})
	return err
}
