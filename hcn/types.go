// Package hcn holds the project's own model of the HCN (HNS v2) objects the
// plugin manages, the Service seam over HNS, and the portable logic (policy
// building, endpoint ensure/remove with rollback) that runs on top of it.
//
// Only *_windows.go files import hcsshim; everything else builds on Linux.
package hcn

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// Protocol is an IP protocol number as HNS expects it in PortMapping policies.
type Protocol uint32

// Protocols HNS supports for port mappings.
const (
	TCP Protocol = 6
	UDP Protocol = 17
)

func (p Protocol) String() string {
	switch p {
	case TCP:
		return "tcp"
	case UDP:
		return "udp"
	}
	return fmt.Sprintf("proto(%d)", uint32(p))
}

// NatFlags mirrors hcsshim's hcn.NatFlags (bit flags).
type NatFlags uint32

// NAT flags of a PortMapping policy.
const (
	NatFlagsLocalRoutedVip NatFlags = 1
	NatFlagsIPv6           NatFlags = 2
)

// PortMappingPolicy is the settings of one HNS v2 "PortMapping" endpoint
// policy. Field names follow hcsshim's PortMappingPolicySetting.
type PortMappingPolicy struct {
	Protocol     Protocol `json:"Protocol"`
	InternalPort uint16   `json:"InternalPort"`
	ExternalPort uint16   `json:"ExternalPort"`
	VIP          string   `json:"VIP,omitempty"`
	Flags        NatFlags `json:"Flags,omitempty"`
}

// String is the policy as operators read it: host:port->port/proto, with
// * (or [::]) for every address and IPv6 VIPs in brackets.
func (p PortMappingPolicy) String() string {
	host := p.VIP
	switch {
	case host == "" && p.IsIPv6():
		host = "[::]"
	case host == "":
		host = "*"
	case p.IsIPv6():
		host = "[" + host + "]"
	}
	return fmt.Sprintf("%s:%d->%d/%s", host, p.ExternalPort, p.InternalPort, p.Protocol)
}

// Runs says policies as operators read them, a run of consecutive host
// ports onto consecutive container ports (same protocol, host IP and
// flags) as one range: *:10000-10999->10000-10999/udp. In the order of
// protocol, flags (IPv4 first), host IP, host port.
func Runs(ps []PortMappingPolicy) []string {
	ps = slices.Clone(ps)
	slices.SortStableFunc(ps, func(a, b PortMappingPolicy) int {
		return cmp.Or(cmp.Compare(a.Protocol, b.Protocol), cmp.Compare(a.Flags, b.Flags), strings.Compare(a.VIP, b.VIP),
			cmp.Compare(a.ExternalPort, b.ExternalPort), cmp.Compare(a.InternalPort, b.InternalPort))
	})
	var out []string
	for i := 0; i < len(ps); {
		j := i + 1
		for j < len(ps) && ps[j].ExternalPort == ps[j-1].ExternalPort+1 && ps[j].InternalPort == ps[j-1].InternalPort+1 &&
			ps[j].Protocol == ps[i].Protocol && ps[j].VIP == ps[i].VIP && ps[j].Flags == ps[i].Flags && ps[j-1].ExternalPort != 65535 {
			j++
		}
		if j-i == 1 {
			out = append(out, ps[i].String())
		} else {
			first, last := ps[i].String(), ps[j-1]
			host, _, _ := strings.Cut(first, "->")
			out = append(out, fmt.Sprintf("%s-%d->%d-%d/%s", host, last.ExternalPort, ps[i].InternalPort, last.InternalPort, ps[i].Protocol))
		}
		i = j
	}
	return out
}

// IsIPv6 reports whether the policy applies to IPv6 traffic.
func (p PortMappingPolicy) IsIPv6() bool { return p.Flags&NatFlagsIPv6 != 0 }

// SortPolicies orders policies canonically.
func SortPolicies(ps []PortMappingPolicy) {
	slices.SortFunc(ps, func(a, b PortMappingPolicy) int {
		if c := int(a.Protocol) - int(b.Protocol); c != 0 {
			return c
		}
		if c := int(a.ExternalPort) - int(b.ExternalPort); c != 0 {
			return c
		}
		if c := int(a.Flags) - int(b.Flags); c != 0 {
			return c
		}
		if c := strings.Compare(a.VIP, b.VIP); c != 0 {
			return c
		}
		return int(a.InternalPort) - int(b.InternalPort)
	})
}

// SamePolicies reports whether two policy sets are equal regardless of order.
func SamePolicies(a, b []PortMappingPolicy) bool { return sameSet(a, b, SortPolicies) }

// sameSet reports whether a and b hold the same elements, sorted by sort.
func sameSet[T comparable](a, b []T, sort func([]T)) bool {
	if len(a) != len(b) {
		return false
	}
	x, y := slices.Clone(a), slices.Clone(b)
	sort(x)
	sort(y)
	return slices.Equal(x, y)
}

// NetworkType is an HNS network type the plugin can create.
type NetworkType string

// Network types: the plugin creates NAT (or, with consent, L2Bridge)
// networks; CNIs' networks may be any of these.
const (
	NetworkNAT      NetworkType = "NAT"
	NetworkL2Bridge NetworkType = "L2Bridge"
	NetworkOverlay  NetworkType = "Overlay"
)

// Is reports whether t is u in any case. HNS's read-back of a network's
// type is compared without case, as moby (which lower-cases types before
// comparing) and kube-proxy's winkernel (strings.EqualFold) do: public
// Get-HnsNetwork dumps show Docker's network as "Type : nat".
func (t NetworkType) Is(u NetworkType) bool { return strings.EqualFold(string(t), string(u)) }

// NetworkSpec describes the HNS network endpoints are created on.
type NetworkSpec struct {
	Name    string      `json:"Name"`
	Type    NetworkType `json:"Type,omitempty"`
	Subnet  string      `json:"Subnet,omitempty"`
	Gateway string      `json:"Gateway,omitempty"`
	Adapter string      `json:"Adapter,omitempty"`
}

// Network is an existing HNS network.
type Network struct {
	ID      string      `json:"ID"`
	Name    string      `json:"Name"`
	Type    NetworkType `json:"Type"`
	Subnets []string    `json:"Subnets,omitempty"`
	// Gateway is the next hop of the subnet's default route, "" when HNS
	// reports none.
	Gateway string `json:"Gateway,omitempty"`
}

// Route is one route of an endpoint, as hcsshim's hcn.Route. A zero Metric
// means HNS's default.
type Route struct {
	DestinationPrefix string `json:"DestinationPrefix"`
	NextHop           string `json:"NextHop"`
	Metric            uint16 `json:"Metric,omitempty"`
}

func (r Route) String() string {
	return fmt.Sprintf("%s via %s metric %d", r.DestinationPrefix, r.NextHop, r.Metric)
}

// IsDefault reports whether r is a default route through a real next hop
// (not the 0.0.0.0 marker that only suppresses HNS's implicit route).
func (r Route) IsDefault() bool {
	hop, err := netip.ParseAddr(r.NextHop)
	return (r.DestinationPrefix == "0.0.0.0/0" || r.DestinationPrefix == "::/0") && err == nil && !hop.IsUnspecified()
}

// SortRoutes orders routes canonically.
func SortRoutes(rs []Route) {
	slices.SortFunc(rs, func(a, b Route) int {
		return cmp.Or(strings.Compare(a.DestinationPrefix, b.DestinationPrefix), strings.Compare(a.NextHop, b.NextHop),
			cmp.Compare(a.Metric, b.Metric))
	})
}

// SameRoutes reports whether two route sets are equal regardless of order.
func SameRoutes(a, b []Route) bool { return sameSet(a, b, SortRoutes) }

// RouteMode says which default route the plugin's endpoint gets. The pod
// already has the CNI's endpoint with its default route; HNS gives a second
// endpoint created without routes a default route of its own with the same
// metric, which then competes for the pod's own traffic.
type RouteMode string

// Route modes (config hcn.default_route).
const (
	// RouteLowPriority: a default route via the network's gateway at a
	// metric far above the CNI's, so replies to mapped flows (strong host
	// model: they leave through our endpoint) have a way out, and the pod's
	// own traffic keeps using the CNI's route.
	RouteLowPriority RouteMode = "low-priority"
	// RouteNone: the 0.0.0.0/0 via 0.0.0.0 route that stops HNS adding one
	// (Azure CNI's workaround).
	RouteNone RouteMode = "none"
	// RouteHNS: no routes sent; HNS adds its own default route.
	RouteHNS RouteMode = "hns"
)

// RouteModes lists the modes in the order the docs give them.
func RouteModes() []RouteMode { return []RouteMode{RouteLowPriority, RouteNone, RouteHNS} }

// Routes returns the routes an endpoint on a network with gateway gw gets
// in mode (metric for low-priority).
func (m RouteMode) Routes(gw string, metric uint16) ([]Route, error) {
	switch m {
	case RouteHNS, "": // the zero mode: send none, as HNS does by itself
		return nil, nil
	case RouteNone:
		return []Route{{DestinationPrefix: "0.0.0.0/0", NextHop: "0.0.0.0"}}, nil
	case RouteLowPriority:
		if metric == 0 {
			return nil, fmt.Errorf("the low-priority default route needs a metric (hcn.route_metric): %w", ErrInvalid)
		}
		if _, err := netip.ParseAddr(gw); err != nil {
			return nil, fmt.Errorf("the network reports no gateway (%q) for the low-priority default route; set hcn.gateway, or hcn.default_route = \"none\": %w", gw, ErrInvalid)
		}
		return []Route{{DestinationPrefix: "0.0.0.0/0", NextHop: gw, Metric: metric}}, nil
	}
	return nil, fmt.Errorf("default route mode %q: %w", m, ErrInvalid)
}

// EndpointSpec is what CreateEndpoint needs. Namespace must stay empty: HNS
// endpoints are created first and attached with AddNamespaceEndpoint.
type EndpointSpec struct {
	Name         string              `json:"Name"`
	NetworkID    string              `json:"NetworkID"`
	Namespace    GUID                `json:"Namespace,omitempty"`
	PortMappings []PortMappingPolicy `json:"PortMappings,omitempty"`
	OutboundNAT  bool                `json:"OutboundNAT,omitempty"`
	Routes       []Route             `json:"Routes,omitempty"`
	// DNS is the pod's own (its CRI sandbox config's), so that the second
	// interface adds no other resolvers: HNS fills in the node's DNS on an
	// endpoint created without any (hcsshim#2369).
	DNS DNS `json:"Dns,omitzero"`
	// NATPolicies are HNS v1 NAT policies (a CNI creating its endpoint
	// through the v1 API, as win-bridge and sdnbridge do unless told to use
	// v2): only tests' CNI-like endpoints have them; the plugin sends none.
	NATPolicies []PortMappingPolicy `json:"NATPolicies,omitempty"`
}

// Endpoint is an existing HNS endpoint.
type Endpoint struct {
	ID           string              `json:"ID"`
	Name         string              `json:"Name"`
	NetworkID    string              `json:"NetworkID"`
	Namespace    GUID                `json:"Namespace,omitempty"` // "" when attached to none
	IPAddress    string              `json:"IPAddress,omitempty"`
	PortMappings []PortMappingPolicy `json:"PortMappings,omitempty"`
	OutboundNAT  bool                `json:"OutboundNAT,omitempty"`
	Routes       []Route             `json:"Routes,omitempty"`
	DNS          DNS                 `json:"Dns,omitzero"`
	// NATPolicies are v1 NAT policies as HNS reports them through the v2
	// API where it does not show them as PortMapping policies (no flags: a
	// v1 policy cannot ask for a local-routed VIP). Which of the two HNS
	// does is not known (hcnsim.Rules.V1NATAsPortMapping); both are read.
	NATPolicies []PortMappingPolicy `json:"NATPolicies,omitempty"`
	// Undecoded names the PortMapping policies HNS read back in a form the
	// plugin cannot decode (each with why): never dropped silently.
	Undecoded []string `json:"Undecoded,omitempty"`
}

// DNS is an endpoint's DNS settings, as hcsshim's hcn.Dns: the suffix of
// its connection (Domain), the search list, the resolvers, the options.
type DNS struct {
	Domain     string   `json:"Domain,omitempty"`
	Search     []string `json:"Search,omitempty"`
	ServerList []string `json:"ServerList,omitempty"`
	Options    []string `json:"Options,omitempty"`
}

// IsZero reports whether no DNS setting is given.
func (d DNS) IsZero() bool {
	return d.Domain == "" && len(d.Search) == 0 && len(d.ServerList) == 0 && len(d.Options) == 0
}

func (d DNS) String() string {
	if d.IsZero() {
		return "none"
	}
	s := "servers " + strings.Join(d.ServerList, ",")
	if len(d.Search) > 0 {
		s += " search " + strings.Join(d.Search, ",")
	}
	if d.Domain != "" {
		s += " suffix " + d.Domain
	}
	return s
}

// Clone returns a copy sharing no slices.
func (d DNS) Clone() DNS {
	return DNS{Domain: d.Domain, Search: slices.Clone(d.Search), ServerList: slices.Clone(d.ServerList), Options: slices.Clone(d.Options)}
}

// Carries reports whether an endpoint that reads back with d carries the
// DNS want asks for, as far as HNS keeps it: the same resolvers (in any
// order), the search list in its order, and want's suffix when it names
// one (HNS fills its own suffix in where none is sent). A want without
// resolvers asks for nothing: HNS's fill-in is all there is.
func (d DNS) Carries(want DNS) bool {
	if len(want.ServerList) == 0 {
		return true
	}
	return sameSet(d.ServerList, want.ServerList, slices.Sort) && slices.Equal(d.Search, want.Search) &&
		(want.Domain == "" || strings.EqualFold(d.Domain, want.Domain))
}

// NeighbourDNS is the DNS of the first of eps (another endpoint of the
// pod's namespace: the CNI's) that has resolvers: what the pod's own
// interface gives it, and so what the plugin's endpoint should carry for
// a pod whose record has no DNS, instead of HNS's fill-in of the node's.
// Zero when none has any.
func NeighbourDNS(eps []Endpoint) DNS {
	for _, ep := range eps {
		if len(ep.DNS.ServerList) > 0 {
			return ep.DNS.Clone()
		}
	}
	return DNS{}
}

// Namespace is an HNS (HCN) namespace: the network compartment of a pod.
type Namespace struct {
	ID        GUID     `json:"ID"`
	Endpoints []string `json:"Endpoints,omitempty"`
}

// Provider is how another endpoint maps a host port.
type Provider struct {
	Endpoint *Endpoint
	Policy   PortMappingPolicy // the endpoint's own policy for the port
	V1NAT    bool              // a v1 NAT policy, not a v2 PortMapping
	// Wider: the endpoint maps the port on every address of the family
	// where p asked one host IP (a CNI that drops the host IP: EKS's
	// vpc-bridge, aws/amazon-vpc-cni-plugins PR #93). HNS holds the port
	// for every address then, so p is the CNI's, not ours to map again.
	Wider bool
}

// ProvidedBy says which endpoint of eps maps what p maps (protocol, host
// port, host IP and address family), and with which policy; nil when none
// does.
func ProvidedBy(p PortMappingPolicy, eps []Endpoint) *Provider {
	same := func(q PortMappingPolicy) bool {
		return q.Protocol == p.Protocol && q.ExternalPort == p.ExternalPort && q.IsIPv6() == p.IsIPv6() && sameVIP(q.VIP, p.VIP)
	}
	wider := func(q PortMappingPolicy) bool {
		return q.Protocol == p.Protocol && q.ExternalPort == p.ExternalPort && q.IsIPv6() == p.IsIPv6() &&
			canonicalVIP(q.VIP) == "" && canonicalVIP(p.VIP) != ""
	}
	for _, match := range []func(PortMappingPolicy) bool{same, wider} { // the same host IP first
		for i := range eps {
			for _, q := range eps[i].PortMappings {
				if match(q) {
					return &Provider{Endpoint: &eps[i], Policy: q, Wider: !sameVIP(q.VIP, p.VIP)}
				}
			}
			for _, q := range eps[i].NATPolicies {
				if match(q) {
					return &Provider{Endpoint: &eps[i], Policy: q, V1NAT: true, Wider: !sameVIP(q.VIP, p.VIP)}
				}
			}
		}
	}
	return nil
}

// sameVIP compares host IPs as addresses ("" and the unspecified address
// both mean every address of the family).
func sameVIP(a, b string) bool { return canonicalVIP(a) == canonicalVIP(b) }

// canonicalVIP is a host IP in one form: "" for every address.
func canonicalVIP(s string) string {
	if ip, err := netip.ParseAddr(s); err == nil {
		if ip.IsUnspecified() {
			return ""
		}
		return ip.Unmap().String()
	}
	return strings.ToLower(s)
}

// Effective says whether a host port another endpoint (a CNI's) maps will
// work, from the network it is on and the kind of its policy; why and fix,
// when it will not. On an L2Bridge network a v1 NAT policy, or a v2
// PortMapping without the local-routed VIP flag, creates no host route, so
// the port never listens (Windows-Containers 360; the fix is the flag, which
// only the v2 API has: Azure CNI and sdnbridge with localRoutedPortMapping
// set it, win-bridge never does). Elsewhere the mapping is taken to work: on a NAT
// network v1 NAT policies are what Docker uses.
func (pv Provider) Effective(network NetworkType) (ok bool, why, fix string) {
	if !network.Is(NetworkL2Bridge) || (!pv.V1NAT && pv.Policy.Flags&NatFlagsLocalRoutedVip != 0) {
		return true, "", ""
	}
	kind := "a v2 PortMapping policy without the LocalRoutedVip flag"
	if pv.V1NAT {
		kind = "an HNS v1 NAT policy"
	}
	return false, fmt.Sprintf("the CNI's endpoint %s maps %s with %s on an L2Bridge network, which creates no host route: the port never listens (Windows-Containers 360)",
			pv.Endpoint.ID, pv.Policy, kind),
		"have the CNI map with the local-routed flag (sdnbridge: \"optionalFlags\": {\"localRoutedPortMapping\": true}), " +
			"or, for a CNI that cannot (win-bridge sets no flag in either apiVersion), remove \"portMappings\" from its \"capabilities\" " +
			"so that this plugin maps the pod's hostPorts itself"
}

// MappingKey is what SameMapping compares, as a value: two policies map
// the same thing exactly when their keys are equal (a set of held ports
// is a map of them, not a list searched per port: a range holds a
// thousand).
type MappingKey struct {
	Protocol                   Protocol
	ExternalPort, InternalPort uint16
	IPv6                       bool
	VIP                        string // canonical: "" for every address
}

// Key is p's MappingKey.
func (p PortMappingPolicy) Key() MappingKey {
	return MappingKey{Protocol: p.Protocol, ExternalPort: p.ExternalPort, InternalPort: p.InternalPort, IPv6: p.IsIPv6(), VIP: canonicalVIP(p.VIP)}
}

// Keys is the set of the keys of ps.
func Keys(ps []PortMappingPolicy) map[MappingKey]bool {
	out := make(map[MappingKey]bool, len(ps))
	for _, p := range ps {
		out[p.Key()] = true
	}
	return out
}

// SameMapping reports whether two policies map the same thing: protocol,
// host port, container port, host IP (in any spelling) and address
// family, whatever their other flags.
func SameMapping(a, b PortMappingPolicy) bool { return a.Key() == b.Key() }
