// Package hcnsim is a portable simulator of HNS for the calls the plugin
// makes. It keeps per-instance state and behaves like HNS where the plugin can
// tell: typed not-found errors, host-port conflicts across endpoints, the
// endpoint/namespace attach rules, address assignment from the network's
// subnet, plus injectable latency and faults. Run it as its own process
// (`nri-hcn-portmap simulator`) so its state outlives the plugin, as HNS does;
// Client reaches it over a local socket.
package hcnsim

import (
	"cmp"
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
)

// Operation names, one per hcn.Service method; faults are keyed by them.
const (
	OpGetNetworkByName       = "GetNetworkByName"
	OpCreateNetwork          = "CreateNetwork"
	OpListNetworks           = "ListNetworks"
	OpCreateEndpoint         = "CreateEndpoint"
	OpListEndpointsByName    = "ListEndpointsByName"
	OpListEndpoints          = "ListEndpoints"
	OpListEndpointsOfNetwork = "ListEndpointsOfNetwork"
	OpGetEndpoint            = "GetEndpoint"
	// OpenedEndpoint counts, in Calls, the endpoints listings opened (one
	// HNS call each through hcsshim); it is not an operation of its own.
	OpenedEndpoint            = "(endpoint opened by a listing)"
	OpDeleteEndpoint          = "DeleteEndpoint"
	OpAddNamespaceEndpoint    = "AddNamespaceEndpoint"
	OpRemoveNamespaceEndpoint = "RemoveNamespaceEndpoint"
	OpGetNamespace            = "GetNamespace"
)

// Ops lists every operation.
func Ops() []string {
	return []string{OpGetNetworkByName, OpCreateNetwork, OpListNetworks, OpCreateEndpoint, OpListEndpointsByName,
		OpListEndpoints, OpListEndpointsOfNetwork, OpGetEndpoint, OpDeleteEndpoint, OpAddNamespaceEndpoint,
		OpRemoveNamespaceEndpoint, OpGetNamespace}
}

// Fault makes the next Count calls of Op fail with an error of Kind. With
// After, the call takes effect first and then reports the error, like an
// HNS call that succeeded but whose answer was lost.
type Fault struct {
	Op    string `json:"op"`
	Kind  string `json:"kind"`
	Count int    `json:"count"`
	After bool   `json:"after,omitempty"`
}

// State is a snapshot of everything the simulator holds.
type State struct {
	Networks   []hcn.Network  `json:"networks"`
	Endpoints  []hcn.Endpoint `json:"endpoints"`
	Namespaces []Namespace    `json:"namespaces"`
}

// Namespace is a namespace as the simulator models it: its endpoints plus
// the route table and DNS servers the compartment gets from them.
type Namespace struct {
	hcn.Namespace
	// Type is HNS's namespace type: NamespaceHost for a pod's namespace
	// (containerd creates them without a type, and HNS makes those Host),
	// NamespaceHostDefault for the host's own default compartment.
	Type string `json:"type,omitempty"`
	// Routes: every attached endpoint's routes; an endpoint created
	// without routes gets HNS's implicit default route via its network's
	// gateway at ImplicitRouteMetric. A route via 0.0.0.0 only stops HNS
	// adding one and is not in the table.
	Routes []hcn.Route `json:"routes,omitempty"`
	// DNSServers: the attached endpoints' DNS servers, in endpoint order.
	DNSServers []string `json:"dnsServers,omitempty"`
}

// Namespace types (hcsshim's NamespaceType).
const (
	NamespaceHost        = "Host"
	NamespaceHostDefault = "HostDefault"
)

// ImplicitRouteMetric is the metric of the default route HNS adds to an
// endpoint created without routes: HNS's default, the same for every such
// endpoint (moby 38187: both networks' default routes at the same metric).
const ImplicitRouteMetric = 0

// DefaultRoutes returns the namespace's default routes through a real
// next hop, lowest metric first.
func (n Namespace) DefaultRoutes() []hcn.Route {
	var out []hcn.Route
	for _, r := range n.Routes {
		if r.IsDefault() {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(a, b hcn.Route) int {
		return cmp.Or(cmp.Compare(a.Metric, b.Metric), strings.Compare(a.NextHop, b.NextHop))
	})
	return out
}

// Rules are the HNS behaviours nobody has verified on a real node. Each has
// two variants; the zero value is the one the simulator always had. The
// product must be right under every combination (AllRules).
type Rules struct {
	// DeleteAttached: HNS deletes an endpoint still attached to a live
	// namespace, instead of refusing with HCN_E_ENTITY_HAS_REFERENCES.
	DeleteAttached bool `json:"deleteAttached,omitempty"`
	// StaleNamespace: deleting a namespace leaves its endpoints naming it,
	// instead of clearing their namespace.
	StaleNamespace bool `json:"staleNamespace,omitempty"`
	// NameFold: a name filter matches case-insensitively, not exactly.
	NameFold bool `json:"nameFold,omitempty"`
	// DropRoutes: HNS does not store an endpoint's routes (builds before
	// endpoint-route support, windows-container-networking PR 116): the
	// endpoint reads back without them and gets HNS's implicit route.
	DropRoutes bool `json:"dropRoutes,omitempty"`
	// SecondNATRefused: HNS refuses a NAT network while another exists
	// (docker/for-win 1384), instead of creating it.
	SecondNATRefused bool `json:"secondNATRefused,omitempty"`
	// NATNeedsSubnet: HNS refuses a NAT network created without a subnet
	// (HCN_E_INVALID_NETWORK), instead of picking one itself, as hcsshim
	// v0.15.0's integration test TestCreateDeleteNetworks expects it to (a
	// NAT network with no Ipams is created). Not seen.
	NATNeedsSubnet bool `json:"natNeedsSubnet,omitempty"`
	// EnumsAsNames: HNS reads a PortMapping policy's protocol and flags
	// back as names ("TCP", "LocalRoutedVip"), as its schema writes enums,
	// instead of as the numbers hcsshim's types hold. Only the emulator's
	// JSON shows it (the simulator's types are already decoded).
	// Unverified either way.
	EnumsAsNames bool `json:"enumsAsNames,omitempty"`
	// NoDNSFill: HNS leaves an endpoint created without DNS servers without
	// any (and one without a suffix without one), instead of filling in the
	// node's resolvers where none are sent and its suffix where none is (as
	// hcsshim#2369, hcsshim#1940 and Windows-Containers#563 show it does:
	// the default; that the suffix is filled in beside resolvers that were
	// sent is unverified, and taken as the worse case).
	NoDNSFill bool `json:"noDNSFill,omitempty"`
	// V1NATAsPortMapping: a v1 NAT policy (a CNI's endpoint made through
	// the v1 API) reads back through the v2 API as a PortMapping policy
	// without flags, instead of as a policy of its own kind (NATPolicies).
	// Not seen on a host either way.
	V1NATAsPortMapping bool `json:"v1NATAsPortMapping,omitempty"`
	// TypeSpelling: how HNS spells a network's type when it reads it back:
	// "" as it was created ("NAT", hcsshim's constants), "lower" ("nat": what
	// public Get-HnsNetwork dumps of Docker's network show, and why moby
	// lower-cases types before comparing and kube-proxy's winkernel
	// compares with strings.EqualFold), "title" ("Nat": not seen, a row of
	// its own). Unverified for the v2 API either way.
	TypeSpelling string `json:"typeSpelling,omitempty"`
	// FlagNameUnknown: HNS reads a PortMapping policy's flags back with a
	// name this plugin does not know (as a newer build might write a flag
	// of its own). Not seen: a stand-in for any read-back the adapter
	// cannot decode, which it must keep (Endpoint.Undecoded), never drop.
	// Only the emulator's JSON shows it.
	FlagNameUnknown bool `json:"flagNameUnknown,omitempty"`
}

// spell is t as HNS reads it back under the TypeSpelling rule.
func (r Rules) spell(t hcn.NetworkType) hcn.NetworkType {
	switch r.TypeSpelling {
	case "lower":
		return hcn.NetworkType(strings.ToLower(string(t)))
	case "title":
		if t == "" {
			return t
		}
		return hcn.NetworkType(string(t[0]) + strings.ToLower(string(t[1:])))
	}
	return t
}

// ReadNetwork is n as HNS reads it back under these rules.
func (r Rules) ReadNetwork(n hcn.Network) hcn.Network {
	n.Type = r.spell(n.Type)
	return n
}

// AllRules returns every combination of the first three rules' variants,
// default first (the rules every test of the endpoint lifecycle runs
// under); DropRoutes and SecondNATRefused touch fewer tests, which run
// under both of their variants themselves.
func AllRules() []Rules {
	var out []Rules
	for i := range 8 {
		out = append(out, Rules{DeleteAttached: i&1 != 0, StaleNamespace: i&2 != 0, NameFold: i&4 != 0})
	}
	return out
}

func (r Rules) String() string {
	pick := func(b bool, no, yes string) string {
		if b {
			return yes
		}
		return no
	}
	s := pick(r.DeleteAttached, "delete-attached-refused", "delete-attached-allowed") + "," +
		pick(r.StaleNamespace, "namespace-delete-clears", "namespace-delete-leaves-guid") + "," +
		pick(r.NameFold, "name-exact", "name-fold")
	if r.DropRoutes {
		s += ",routes-dropped"
	}
	if r.SecondNATRefused {
		s += ",second-nat-refused"
	}
	if r.V1NATAsPortMapping {
		s += ",v1-nat-as-portmapping"
	}
	if r.NoDNSFill {
		s += ",no-dns-fill"
	}
	if r.EnumsAsNames {
		s += ",enums-as-names"
	}
	if r.NATNeedsSubnet {
		s += ",nat-needs-subnet"
	}
	if r.FlagNameUnknown {
		s += ",flag-name-unknown"
	}
	if r.TypeSpelling != "" {
		s += ",types-" + r.TypeSpelling
	}
	return s
}

// implicitNAT is the subnet HNS picks for a NAT network created without
// one (the real HNS picks a free range in 172.16.0.0/12).
var implicitNAT = netip.MustParsePrefix("172.31.240.0/20")

type network struct {
	hcn.Network
	prefix  netip.Prefix
	gateway netip.Addr
	next    netip.Addr
}

// Sim is one simulated HNS. The zero value is not usable; call New.
type Sim struct {
	mu         sync.Mutex
	rules      Rules
	networks   map[string]*network
	endpoints  map[string]*hcn.Endpoint
	namespaces map[hcn.GUID]map[string]bool // namespace -> endpoint IDs
	nsTypes    map[hcn.GUID]string          // namespace -> its type, when not Host
	faults     []Fault
	latency    time.Duration
	opLatency  map[string]time.Duration // per operation, over latency
	calls      map[string]int
	late       sync.WaitGroup // calls completing after their caller gave up
	serial     sync.Mutex     // held through a whole call when serialized
	serialized bool
	hostDNS    hcn.DNS // what HNS fills in on an endpoint created without DNS servers
}

// HostDNS is the node's DNS the simulator fills in: the one hcsshim#2369
// shows (a VPC resolver and the host's suffix).
func HostDNS() hcn.DNS { return hcn.DNS{ServerList: []string{"10.0.0.2"}, Domain: "node.internal"} }

var _ hcn.Node = (*Sim)(nil)

// SimVersion is the HNS version the simulator reports.
const SimVersion = "15.1"

// New returns an empty simulator.
func New() *Sim {
	s := &Sim{hostDNS: HostDNS()}
	s.Reset()
	return s
}

// SetRules chooses the variants of the unverified HNS rules; they outlive
// Reset.
func (s *Sim) SetRules(r Rules) {
	s.mu.Lock()
	s.rules = r
	s.mu.Unlock()
}

// Rules returns the rule variants in force.
func (s *Sim) Rules() Rules {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rules
}

// Reset drops all state, faults and latency.
func (s *Sim) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.networks = map[string]*network{}
	s.endpoints = map[string]*hcn.Endpoint{}
	s.namespaces = map[hcn.GUID]map[string]bool{}
	s.nsTypes = map[hcn.GUID]string{}
	s.faults = nil
	s.latency = 0
	s.serialized = false
	s.opLatency = map[string]time.Duration{}
	s.calls = map[string]int{}
}

func newGUID() string { return strings.ToUpper(uuid.NewString()) }

// canon is a namespace GUID in its one form, however the caller spelled it
// (HNS takes any spelling).
func canon(id hcn.GUID) hcn.GUID { return hcn.ParseGUID(string(id)) }

// SetLatency delays every Service call by d. A caller whose context ends
// first gets its error at once; the call still takes effect after d.
func (s *Sim) SetLatency(d time.Duration) {
	s.mu.Lock()
	s.latency = d
	s.mu.Unlock()
}

// SetSerialized makes calls run one at a time, latency included: a burst
// queues inside "HNS", as it does on a real node.
func (s *Sim) SetSerialized(on bool) {
	s.mu.Lock()
	s.serialized = on
	s.mu.Unlock()
}

// SetOpLatency delays calls of one operation by d (0: back to the common
// latency), like SetLatency.
func (s *Sim) SetOpLatency(op string, d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if d == 0 {
		delete(s.opLatency, op)
	} else {
		s.opLatency[op] = d
	}
}

// InjectFault queues a fault.
func (s *Sim) InjectFault(f Fault) error {
	if !slices.Contains(Ops(), f.Op) {
		return fmt.Errorf("fault: unknown op %q (want one of %s): %w", f.Op, strings.Join(Ops(), ", "), hcn.ErrInvalid)
	}
	if _, ok := hcn.Named(f.Kind); !ok {
		return fmt.Errorf("fault: unknown kind %q: %w", f.Kind, hcn.ErrInvalid)
	}
	if f.Count <= 0 {
		f.Count = 1
	}
	s.mu.Lock()
	s.faults = append(s.faults, f)
	s.mu.Unlock()
	return nil
}

// ClearFaults drops every queued fault.
func (s *Sim) ClearFaults() {
	s.mu.Lock()
	s.faults = nil
	s.mu.Unlock()
}

// Calls returns how often each operation was called.
func (s *Sim) Calls() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int, len(s.calls))
	for k, v := range s.calls {
		out[k] = v
	}
	return out
}

// CreateNamespace models containerd creating a pod's HCN namespace (type
// Host). An empty id gets a fresh GUID. Creating an existing namespace is a
// no-op.
func (s *Sim) CreateNamespace(spelled string) hcn.GUID {
	return s.CreateNamespaceOfType(spelled, NamespaceHost)
}

// CreateNamespaceOfType creates a namespace of an HNS namespace type ("" is
// Host, as HNS makes a namespace created without one).
func (s *Sim) CreateNamespaceOfType(spelled, typ string) hcn.GUID {
	id := hcn.ParseGUID(spelled)
	if id == "" {
		id = hcn.GUID(newGUID())
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.namespaces[id] == nil {
		s.namespaces[id] = map[string]bool{}
		if typ != "" && typ != NamespaceHost {
			s.nsTypes[id] = typ
		}
	}
	return id
}

// DeleteNamespace models containerd deleting a pod's namespace: endpoints in
// it are detached (not deleted); with Rules.StaleNamespace they keep naming
// it.
func (s *Sim) DeleteNamespace(id hcn.GUID) error {
	id = canon(id)
	s.mu.Lock()
	defer s.mu.Unlock()
	eps, ok := s.namespaces[id]
	if !ok {
		return fmt.Errorf("namespace %s: %w", id, hcn.ErrNotFound)
	}
	for epID := range eps {
		if ep := s.endpoints[epID]; ep != nil && !s.rules.StaleNamespace {
			ep.Namespace = ""
		}
	}
	delete(s.namespaces, id)
	delete(s.nsTypes, id)
	return nil
}

// Version implements hcn.Node.
func (s *Sim) Version(ctx context.Context) (string, error) {
	return run(ctx, s, "Version", func() (string, error) { return SimVersion, nil })
}

// NewNamespace implements hcn.Node.
func (s *Sim) NewNamespace(context.Context) (hcn.GUID, error) { return s.CreateNamespace(""), nil }

// RemoveNamespace implements hcn.Node.
func (s *Sim) RemoveNamespace(_ context.Context, id hcn.GUID) error { return s.DeleteNamespace(id) }

// RestartHNS models the HNS service restarting (calico 5164): every
// endpoint is gone, and with it every namespace's endpoint list; networks
// and namespaces stay.
func (s *Sim) RestartHNS() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.endpoints = map[string]*hcn.Endpoint{}
	for id := range s.namespaces {
		s.namespaces[id] = map[string]bool{}
	}
}

// AddStaleEndpoint models what a reboot can leave (docker/for-win 13965,
// service-fabric 389): an endpoint that still names namespace ns, which no
// longer exists, and still holds its host ports. The endpoint is created
// with HNS's rules (ports, network), then pointed at ns.
func (s *Sim) AddStaleEndpoint(spec hcn.EndpointSpec, ns hcn.GUID) (*hcn.Endpoint, error) {
	ns = canon(ns)
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.namespaces[ns]; ok {
		return nil, fmt.Errorf("namespace %s exists; a stale endpoint names a namespace that is gone: %w", ns, hcn.ErrInvalid)
	}
	ep, err := s.createEndpoint(spec)
	if err != nil {
		return nil, err
	}
	s.endpoints[ep.ID].Namespace = ns
	ep.Namespace = ns
	return ep, nil
}

// State returns a sorted snapshot.
func (s *Sim) State() State {
	s.mu.Lock()
	defer s.mu.Unlock()
	var st State
	for _, n := range s.networks {
		st.Networks = append(st.Networks, n.Network)
	}
	for _, ep := range s.endpoints {
		st.Endpoints = append(st.Endpoints, cloneEP(ep))
	}
	for id, eps := range s.namespaces {
		ns := Namespace{Namespace: hcn.Namespace{ID: id}, Type: cmp.Or(s.nsTypes[id], NamespaceHost)}
		for e := range eps {
			ns.Endpoints = append(ns.Endpoints, e)
		}
		slices.Sort(ns.Endpoints)
		for _, e := range ns.Endpoints {
			ep := s.endpoints[e]
			if ep == nil {
				continue
			}
			ns.Routes = append(ns.Routes, s.routesOf(ep)...)
			ns.DNSServers = append(ns.DNSServers, ep.DNS.ServerList...)
		}
		st.Namespaces = append(st.Namespaces, ns)
	}
	slices.SortFunc(st.Networks, func(a, b hcn.Network) int { return strings.Compare(a.Name+a.ID, b.Name+b.ID) })
	slices.SortFunc(st.Endpoints, func(a, b hcn.Endpoint) int { return strings.Compare(a.Name+a.ID, b.Name+b.ID) })
	slices.SortFunc(st.Namespaces, func(a, b Namespace) int { return strings.Compare(string(a.ID), string(b.ID)) })
	return st
}

// routesOf returns what an endpoint adds to its compartment's route table.
func (s *Sim) routesOf(ep *hcn.Endpoint) []hcn.Route {
	if len(ep.Routes) == 0 {
		if n := s.networks[ep.NetworkID]; n != nil && n.gateway.IsValid() {
			return []hcn.Route{{DestinationPrefix: "0.0.0.0/0", NextHop: n.gateway.String(), Metric: ImplicitRouteMetric}}
		}
		return nil
	}
	var out []hcn.Route
	for _, r := range ep.Routes {
		if hop, err := netip.ParseAddr(r.NextHop); err == nil && !hop.IsUnspecified() {
			out = append(out, r)
		}
	}
	return out
}

func cloneEP(ep *hcn.Endpoint) hcn.Endpoint {
	c := *ep
	c.PortMappings = slices.Clone(ep.PortMappings)
	c.Routes = slices.Clone(ep.Routes)
	c.DNS = ep.DNS.Clone()
	c.NATPolicies = slices.Clone(ep.NATPolicies)
	c.Undecoded = slices.Clone(ep.Undecoded)
	return c
}

// readBack is an endpoint as HNS answers for it through the v2 API: v1 NAT
// policies as their own kind, or, with Rules.V1NATAsPortMapping, as
// PortMapping policies without flags. The caller holds mu.
func (s *Sim) readBack(ep *hcn.Endpoint) hcn.Endpoint {
	c := cloneEP(ep)
	if s.rules.V1NATAsPortMapping && len(c.NATPolicies) > 0 {
		for _, p := range c.NATPolicies {
			p.Flags = 0
			c.PortMappings = append(c.PortMappings, p)
		}
		hcn.SortPolicies(c.PortMappings)
		c.NATPolicies = nil
	}
	return c
}

// run counts the call, waits out the latency, pops a matching fault and
// runs body under s.mu. When ctx ends during the latency, the caller gets
// ctx's error at once but the call still takes effect when its latency has
// passed, as an HNS call does that its caller gave up on.
func run[T any](ctx context.Context, s *Sim, op string, body func() (T, error)) (T, error) {
	var zero T
	s.mu.Lock()
	serialized := s.serialized
	s.mu.Unlock()
	release := func() {}
	if serialized { // one call at a time, counted once it runs
		s.serial.Lock()
		release = s.serial.Unlock
	}
	handedOff := false // a late call releases the slot when it is done
	defer func() {
		if !handedOff {
			release()
		}
	}()
	s.mu.Lock()
	s.calls[op]++
	d := s.latency
	if od, ok := s.opLatency[op]; ok {
		d = od
	}
	s.mu.Unlock()
	if d > 0 {
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-ctx.Done():
			s.late.Add(1)
			handedOff = true
			go func() { // HNS finishes what it was asked, late
				defer s.late.Done()
				defer release()
				<-t.C
				s.mu.Lock()
				defer s.mu.Unlock()
				_, _ = body()
			}()
			return zero, fmt.Errorf("%s: %w", op, ctx.Err())
		}
	}
	s.mu.Lock()
	var after *Fault
	for i := range s.faults {
		f := &s.faults[i]
		if f.Op != op {
			continue
		}
		out := *f
		if f.Count--; f.Count <= 0 {
			s.faults = slices.Delete(s.faults, i, i+1)
		}
		if !out.After {
			s.mu.Unlock()
			return zero, faultErr(out)
		}
		after = &out
		break
	}
	v, err := body()
	s.mu.Unlock()
	if err == nil && after != nil {
		return zero, faultErr(*after)
	}
	return v, err
}

// WaitLate waits until every call whose caller gave up has taken effect.
func (s *Sim) WaitLate() { s.late.Wait() }

func faultErr(f Fault) error {
	kind, _ := hcn.Named(f.Kind)
	return fmt.Errorf("injected fault in %s: %w", f.Op, kind)
}

// GetNetworkByName implements hcn.Service.
func (s *Sim) GetNetworkByName(ctx context.Context, name string) (*hcn.Network, error) {
	return run(ctx, s, OpGetNetworkByName, func() (*hcn.Network, error) {
		for _, n := range s.networks {
			if n.Name == name {
				c := s.rules.ReadNetwork(n.Network)
				return &c, nil
			}
		}
		return nil, fmt.Errorf("network %q: %w", name, hcn.ErrNotFound)
	})
}

// ListNetworks implements hcn.Service.
func (s *Sim) ListNetworks(ctx context.Context) ([]hcn.Network, error) {
	return run(ctx, s, OpListNetworks, func() ([]hcn.Network, error) {
		out := make([]hcn.Network, 0, len(s.networks))
		for _, n := range s.networks {
			out = append(out, s.rules.ReadNetwork(n.Network))
		}
		slices.SortFunc(out, func(a, b hcn.Network) int { return strings.Compare(a.Name+a.ID, b.Name+b.ID) })
		return out, nil
	})
}

// CreateNetwork implements hcn.Service.
func (s *Sim) CreateNetwork(ctx context.Context, spec hcn.NetworkSpec) (*hcn.Network, error) {
	return run(ctx, s, OpCreateNetwork, func() (*hcn.Network, error) { return s.createNetwork(spec) })
}

func (s *Sim) createNetwork(spec hcn.NetworkSpec) (*hcn.Network, error) {
	if spec.Name == "" {
		return nil, fmt.Errorf("network without a name: %w", hcn.ErrInvalid)
	}
	if spec.Type != hcn.NetworkNAT && spec.Type != hcn.NetworkL2Bridge && spec.Type != hcn.NetworkOverlay {
		return nil, fmt.Errorf("network %q: type %q (HCN_E_INVALID_NETWORK_TYPE): %w", spec.Name, spec.Type, hcn.ErrInvalid)
	}
	if spec.Type == hcn.NetworkNAT && s.rules.SecondNATRefused {
		for _, other := range s.networks {
			if other.Type == hcn.NetworkNAT {
				return nil, fmt.Errorf("network %q: NAT network %q exists, and this HNS takes one NAT network only (ERROR_OBJECT_ALREADY_EXISTS): %w",
					spec.Name, other.Name, hcn.ErrExists)
			}
		}
	}
	if spec.Subnet == "" && spec.Type == hcn.NetworkNAT && s.rules.NATNeedsSubnet {
		return nil, fmt.Errorf("network %q: a NAT network without a subnet (HCN_E_INVALID_NETWORK): %w", spec.Name, hcn.ErrInvalid)
	}
	n := &network{Network: hcn.Network{ID: newGUID(), Name: spec.Name, Type: spec.Type}}
	if spec.Subnet == "" && spec.Type == hcn.NetworkNAT { // HNS picks one
		spec.Subnet = implicitNAT.String()
	}
	if spec.Subnet != "" {
		p, err := netip.ParsePrefix(spec.Subnet)
		if err != nil {
			return nil, fmt.Errorf("network %q: subnet %q: %w", spec.Name, spec.Subnet, hcn.ErrInvalid)
		}
		n.prefix = p.Masked()
		n.next = n.prefix.Addr().Next()
		if spec.Gateway != "" {
			gw, err := netip.ParseAddr(spec.Gateway)
			if err != nil || !n.prefix.Contains(gw) {
				return nil, fmt.Errorf("network %q: gateway %q is not in subnet %s (HCN_E_INVALID_IP): %w", spec.Name, spec.Gateway, n.prefix, hcn.ErrInvalid)
			}
			n.gateway = gw
		} else if spec.Type == hcn.NetworkNAT { // HNS: the subnet's first address
			n.gateway = n.prefix.Addr().Next()
		}
		if n.gateway.IsValid() {
			n.Gateway = n.gateway.String()
		}
		n.Subnets = []string{n.prefix.String()}
	}
	s.networks[n.ID] = n
	c := s.rules.ReadNetwork(n.Network)
	return &c, nil
}

// CreateEndpoint implements hcn.Service.
func (s *Sim) CreateEndpoint(ctx context.Context, spec hcn.EndpointSpec) (*hcn.Endpoint, error) {
	return run(ctx, s, OpCreateEndpoint, func() (*hcn.Endpoint, error) { return s.createEndpoint(spec) })
}

func (s *Sim) createEndpoint(spec hcn.EndpointSpec) (*hcn.Endpoint, error) {
	if spec.Namespace != "" {
		return nil, fmt.Errorf("endpoint %q: a namespace cannot be set at creation, attach it instead: %w", spec.Name, hcn.ErrInvalid)
	}
	n := s.networks[spec.NetworkID]
	if n == nil {
		return nil, fmt.Errorf("network %s: %w", spec.NetworkID, hcn.ErrNotFound)
	}
	spec.NetworkID = hcn.CanonicalGUID(spec.NetworkID)
	mappings := slices.Concat(spec.PortMappings, spec.NATPolicies) // HNS takes a host port once, whatever the policy's kind
	for i, p := range mappings {
		if err := validPolicy(p); err != nil {
			return nil, fmt.Errorf("endpoint %q: policy %s: %w", spec.Name, p, err)
		}
		for _, q := range mappings[:i] {
			if conflicts(p, q) {
				return nil, fmt.Errorf("endpoint %q: policies %s and %s overlap (HCN_E_PORT_ALREADY_EXISTS): %w", spec.Name, p, q, hcn.ErrPortInUse)
			}
		}
		for _, other := range s.endpoints {
			for _, q := range slices.Concat(other.PortMappings, other.NATPolicies) {
				if conflicts(p, q) {
					return nil, fmt.Errorf("endpoint %q: policy %s collides with %s of endpoint %s (HCN_E_PORT_ALREADY_EXISTS): %w",
						spec.Name, p, q, other.ID, hcn.ErrPortInUse)
				}
			}
		}
	}
	for _, r := range spec.Routes {
		_, perr := netip.ParsePrefix(r.DestinationPrefix)
		_, herr := netip.ParseAddr(r.NextHop)
		if perr != nil || herr != nil {
			return nil, fmt.Errorf("endpoint %q: route %s (HCN_E_INVALID_JSON): %w", spec.Name, r, hcn.ErrInvalid)
		}
	}
	ep := &hcn.Endpoint{ID: newGUID(), Name: spec.Name, NetworkID: n.ID,
		PortMappings: slices.Clone(spec.PortMappings), OutboundNAT: spec.OutboundNAT,
		Routes: slices.Clone(spec.Routes), DNS: spec.DNS.Clone(), NATPolicies: slices.Clone(spec.NATPolicies)}
	if !s.rules.NoDNSFill { // HNS fills in the node's resolvers where none are sent, and its suffix where none is (hcsshim#2369)
		if len(ep.DNS.ServerList) == 0 {
			ep.DNS.ServerList = slices.Clone(s.hostDNS.ServerList)
		}
		ep.DNS.Domain = cmp.Or(ep.DNS.Domain, s.hostDNS.Domain)
	}
	if s.rules.DropRoutes {
		ep.Routes = nil // not stored, not applied: HNS's implicit route it is
	}
	if n.prefix.IsValid() {
		ip := n.next
		if ip == n.gateway {
			ip = ip.Next()
		}
		if !n.prefix.Contains(ip) {
			return nil, fmt.Errorf("network %q: subnet %s exhausted: %w", n.Name, n.prefix, hcn.ErrInvalid)
		}
		n.next = ip.Next()
		ep.IPAddress = ip.String()
	}
	s.endpoints[ep.ID] = ep
	c := s.readBack(ep)
	return &c, nil
}

func validPolicy(p hcn.PortMappingPolicy) error {
	if p.Protocol != hcn.TCP && p.Protocol != hcn.UDP {
		return fmt.Errorf("protocol %d (HCN_E_INVALID_POLICY): %w", p.Protocol, hcn.ErrInvalid)
	}
	if p.ExternalPort == 0 || p.InternalPort == 0 {
		return fmt.Errorf("port 0 (HCN_E_INVALID_INTERNAL_PORT): %w", hcn.ErrInvalid)
	}
	if p.VIP != "" {
		a, err := netip.ParseAddr(p.VIP)
		if err != nil {
			return fmt.Errorf("VIP %q (HCN_E_INVALID_IP): %w", p.VIP, hcn.ErrInvalid)
		}
		if a.Is6() != p.IsIPv6() {
			return fmt.Errorf("VIP %q does not match the IPv6 flag (HCN_E_INVALID_POLICY): %w", p.VIP, hcn.ErrInvalid)
		}
	}
	return nil
}

// conflicts: same protocol, same host port, same address family, and either
// side on every address or both on the same address.
func conflicts(p, q hcn.PortMappingPolicy) bool {
	return p.Protocol == q.Protocol && p.ExternalPort == q.ExternalPort && p.IsIPv6() == q.IsIPv6() &&
		(p.VIP == "" || q.VIP == "" || p.VIP == q.VIP)
}

// ListEndpointsByName implements hcn.Service.
func (s *Sim) ListEndpointsByName(ctx context.Context, name string) ([]hcn.Endpoint, error) {
	return s.list(ctx, OpListEndpointsByName, func(ep *hcn.Endpoint) bool {
		return ep.Name == name || s.rules.NameFold && strings.EqualFold(ep.Name, name)
	})
}

// ListEndpoints implements hcn.Service.
func (s *Sim) ListEndpoints(ctx context.Context) ([]hcn.Endpoint, error) {
	return s.list(ctx, OpListEndpoints, func(*hcn.Endpoint) bool { return true })
}

// ListEndpointsOfNetwork implements hcn.Service.
func (s *Sim) ListEndpointsOfNetwork(ctx context.Context, networkID string) ([]hcn.Endpoint, error) {
	networkID = hcn.CanonicalGUID(networkID)
	return s.list(ctx, OpListEndpointsOfNetwork, func(ep *hcn.Endpoint) bool { return ep.NetworkID == networkID })
}

// GetEndpoint implements hcn.Service: a listing filtered by ID, as
// hcsshim's GetEndpointByID is.
func (s *Sim) GetEndpoint(ctx context.Context, id string) (*hcn.Endpoint, error) {
	id = hcn.CanonicalGUID(id)
	eps, err := s.list(ctx, OpGetEndpoint, func(ep *hcn.Endpoint) bool { return ep.ID == id })
	if err != nil {
		return nil, err
	}
	if len(eps) == 0 {
		return nil, fmt.Errorf("endpoint %s: %w", id, hcn.ErrNotFound)
	}
	return &eps[0], nil
}

// list is a listing as hcsshim makes it: HNS enumerates the IDs the query
// matches (one call, after which faults and latency apply as for any
// call), then each endpoint is opened and queried on its own (one more
// call's latency each). An endpoint deleted in between fails the whole
// listing with ERROR_NOT_FOUND, as hcsshim returns on the first error.
func (s *Sim) list(ctx context.Context, op string, match func(*hcn.Endpoint) bool) ([]hcn.Endpoint, error) {
	ids, err := run(ctx, s, op, func() ([]string, error) {
		var ids []string
		for _, ep := range s.endpoints {
			if match(ep) {
				ids = append(ids, ep.ID)
			}
		}
		slices.Sort(ids)
		return ids, nil
	})
	if err != nil {
		return nil, err
	}
	out := make([]hcn.Endpoint, 0, len(ids))
	for _, id := range ids {
		if err := s.wait(ctx, op); err != nil {
			return nil, fmt.Errorf("%s: opening endpoint %s: %w", op, id, err)
		}
		s.mu.Lock()
		s.calls[OpenedEndpoint]++
		ep := s.endpoints[id]
		if ep == nil {
			s.mu.Unlock()
			return nil, fmt.Errorf("%s: opening endpoint %s (ERROR_NOT_FOUND; deleted during the listing): %w", op, id, hcn.ErrNotFound)
		}
		out = append(out, s.readBack(ep))
		s.mu.Unlock()
	}
	return out, nil
}

// wait waits out one call's latency of op, or until ctx ends.
func (s *Sim) wait(ctx context.Context, op string) error {
	s.mu.Lock()
	d := s.latency
	if od, ok := s.opLatency[op]; ok {
		d = od
	}
	s.mu.Unlock()
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// DeleteEndpoint implements hcn.Service. An endpoint attached to a live
// namespace has references and is not deleted, unless Rules.DeleteAttached
// (then it leaves its namespace as it goes).
func (s *Sim) DeleteEndpoint(ctx context.Context, id string) error {
	id = hcn.CanonicalGUID(id)
	_, err := run(ctx, s, OpDeleteEndpoint, func() (struct{}, error) {
		ep := s.endpoints[id]
		switch {
		case ep == nil:
			return struct{}{}, fmt.Errorf("endpoint %s (ERROR_NOT_FOUND): %w", id, hcn.ErrNotFound)
		case ep.Namespace != "" && s.namespaces[ep.Namespace] != nil && !s.rules.DeleteAttached:
			// an endpoint naming a namespace that is gone (a stale one
			// after a reboot) can be deleted: Azure CNI PR 1272 deletes
			// endpoints whose detach failed with namespace not found
			return struct{}{}, fmt.Errorf("endpoint %s is attached to namespace %s (HCN_E_ENTITY_HAS_REFERENCES): %w", id, ep.Namespace, hcn.ErrInUse)
		}
		if ns := s.namespaces[ep.Namespace]; ns != nil {
			delete(ns, id)
		}
		delete(s.endpoints, id)
		return struct{}{}, nil
	})
	return err
}

// AddNamespaceEndpoint implements hcn.Service.
func (s *Sim) AddNamespaceEndpoint(ctx context.Context, namespaceID hcn.GUID, endpointID string) error {
	namespaceID, endpointID = canon(namespaceID), hcn.CanonicalGUID(endpointID) // HNS: any spelling
	_, err := run(ctx, s, OpAddNamespaceEndpoint, func() (struct{}, error) {
		ns, ep := s.namespaces[namespaceID], s.endpoints[endpointID]
		switch {
		case ns == nil:
			return struct{}{}, fmt.Errorf("namespace %s (ERROR_NOT_FOUND): %w", namespaceID, hcn.ErrNotFound)
		case ep == nil:
			return struct{}{}, fmt.Errorf("endpoint %s (ERROR_NOT_FOUND): %w", endpointID, hcn.ErrNotFound)
		case ep.Namespace != "":
			return struct{}{}, fmt.Errorf("endpoint %s is in namespace %s (HCN_E_ENDPOINT_ALREADY_ATTACHED): %w", endpointID, ep.Namespace, hcn.ErrAlreadyAttached)
		}
		ep.Namespace = namespaceID
		ns[endpointID] = true
		return struct{}{}, nil
	})
	return err
}

// RemoveNamespaceEndpoint implements hcn.Service.
func (s *Sim) RemoveNamespaceEndpoint(ctx context.Context, namespaceID hcn.GUID, endpointID string) error {
	namespaceID, endpointID = canon(namespaceID), hcn.CanonicalGUID(endpointID)
	_, err := run(ctx, s, OpRemoveNamespaceEndpoint, func() (struct{}, error) {
		ns := s.namespaces[namespaceID]
		switch {
		case ns == nil:
			return struct{}{}, fmt.Errorf("namespace %s (ERROR_NOT_FOUND): %w", namespaceID, hcn.ErrNotFound)
		case !ns[endpointID]:
			return struct{}{}, fmt.Errorf("endpoint %s in namespace %s (ERROR_NOT_FOUND): %w", endpointID, namespaceID, hcn.ErrNotFound)
		}
		delete(ns, endpointID)
		if ep := s.endpoints[endpointID]; ep != nil {
			ep.Namespace = ""
		}
		return struct{}{}, nil
	})
	return err
}

// GetNamespace implements hcn.Service.
func (s *Sim) GetNamespace(ctx context.Context, id hcn.GUID) (*hcn.Namespace, error) {
	id = canon(id)
	return run(ctx, s, OpGetNamespace, func() (*hcn.Namespace, error) {
		eps, ok := s.namespaces[id]
		if !ok {
			return nil, fmt.Errorf("namespace %s (ERROR_NOT_FOUND): %w", id, hcn.ErrNotFound)
		}
		ns := &hcn.Namespace{ID: id}
		for e := range eps {
			ns.Endpoints = append(ns.Endpoints, e)
		}
		slices.Sort(ns.Endpoints)
		return ns, nil
	})
}

// Kinds returns the fault kinds: the names of hcn's table of HNS errors
// (hcn.Names), "internal" standing for an HNS failure the table gives no
// meaning (E_FAIL).
func Kinds() []string { return hcn.Names() }
