package hcn

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
)

// ManagerConfig says where and how endpoints are built.
type ManagerConfig struct {
	Network       NetworkSpec
	CreateNetwork bool // create Network when no network of that name exists
	// Prefix starts the name of every endpoint the manager owns (the
	// configuration's, config.EndpointPrefix): the rest of the name is the
	// sandbox ID, so removal works from the ID alone. Required: every
	// endpoint named so is taken for the manager's own.
	Prefix string
	// ListingAttempts bounds how often a listing that met a deletion is
	// taken (config.HNSListingAttempts; at least once).
	ListingAttempts int
	OutboundNAT     bool // add an OutBoundNAT policy to every endpoint
	// IPv6 policies will be asked for (dual stack): a NAT network, which
	// does not support IPv6, is refused with an error that says so.
	IPv6 bool
	// DefaultRoute is the endpoint's default route and RouteMetric the
	// metric of a low-priority one (config.Default has their defaults).
	DefaultRoute RouteMode
	RouteMetric  uint16
	// AllowCNINetwork lets endpoints go on a network that is not NAT. Our
	// endpoint is created without an address, so HNS gives it one from the
	// network's subnet; on a NAT network the addresses are HNS's own, but on
	// L2Bridge or Overlay networks a CNI's IPAM (host-local, Calico IPAM,
	// Azure CNS) hands them out and does not know the one HNS gave ours, and
	// gives it to a pod again (kubernetes 74766, Windows-Containers 631).
	AllowCNINetwork bool
	// Announce, when set, hears what the manager did to find its network:
	// created it, or used another NAT network where HNS takes one only.
	Announce func(n Network, what string)
	// HostPrefixes lists the host's own address prefixes, which a subnet
	// the manager picks must stay clear of (nil: the host's interfaces).
	HostPrefixes func() ([]netip.Prefix, error)
	// ClusterRanges are the cluster's service and pod ranges: a subnet the
	// manager picks stays clear of them, and a NAT network found
	// overlapping them, another HNS network or the host's addresses is
	// refused (ErrInvalid), unless AllowOverlap.
	ClusterRanges []netip.Prefix
	// AllowOverlap takes a NAT network whose subnet overlaps what
	// Overlaps names (hcn.allow_subnet_overlap), telling Shadowed.
	AllowOverlap bool
	// Shadowed, when set, hears the overlaps of the network's subnet
	// (Overlaps) when the network is first found or created and they are
	// allowed.
	Shadowed func(n Network, overlaps []string)
}

// Manager performs the HNS steps of the plugin's endpoints through a
// Service: find (or create) the network (Target), look a sandbox's
// endpoints up, take the steps of a plan (Apply: the plans are Diff's and
// Removal's, functions of values), and list what is ours. It keeps nothing
// about endpoints: what is known of them belongs to the caller (the
// plugin's controller), which passes it in. It remembers the network's ID
// and gateway, and what HNS does with routes. It is safe for concurrent use; callers serialize work per
// sandbox.
type Manager struct {
	svc Service
	cfg ManagerConfig

	netMu     sync.Mutex // one network lookup-or-create at a time: HNS allows duplicate names
	mu        sync.Mutex
	networkID string                 // cached ID of cfg.Network
	gateway   string                 // its gateway: as HNS reports it, else as configured
	kept      int                    // what HNS does with routes: routesUnknown, routesKept or routesNotKept
	netTypes  map[string]NetworkType // network ID -> type, of networks seen (NetworkType)
}

// NewManager returns a Manager over svc.
func NewManager(svc Service, cfg ManagerConfig) *Manager {
	if cfg.Prefix == "" {
		panic("hcn.NewManager: no endpoint name prefix: every endpoint would be taken for the plugin's own")
	}
	cfg.ListingAttempts = max(cfg.ListingAttempts, 1)
	return &Manager{svc: svc, cfg: cfg}
}

// Lookup returns the sandbox's endpoints as HNS holds them now.
func (m *Manager) Lookup(ctx context.Context, sandboxID string) ([]Endpoint, error) {
	name := m.EndpointName(sandboxID)
	eps, err := m.byName(ctx, name)
	if err != nil {
		return nil, stepErr(StepLookupEndpoint, name, err)
	}
	m.learnFromReadBack(eps)
	return eps, nil
}

// byName lists the endpoints named exactly name: HNS's name filter may fold
// case, and an endpoint named like ours in other case is someone else's.
func (m *Manager) byName(ctx context.Context, name string) ([]Endpoint, error) {
	eps, err := listing(m.cfg.ListingAttempts, "ListEndpointsByName", func() ([]Endpoint, error) { return m.svc.ListEndpointsByName(ctx, name) })
	return slices.DeleteFunc(eps, func(ep Endpoint) bool { return ep.Name != name }), err
}

// listing takes a listing of HNS. hcsshim enumerates, then opens each
// endpoint and returns on the first error: one deleted in between fails the
// whole listing with not-found, which says nothing about what was asked
// for. Such a listing is taken again; if HNS keeps changing, the error is
// ErrChanged (retried by the caller), not a final not-found.
func listing(attempts int, call string, list func() ([]Endpoint, error)) ([]Endpoint, error) {
	var err error
	for range attempts {
		var eps []Endpoint
		if eps, err = list(); ReadingOf(call, err) != ReadAgain {
			return eps, err
		}
	}
	return nil, fmt.Errorf("%w: %w", ErrChanged, err)
}

// EndpointName is the deterministic endpoint name of a sandbox.
func (m *Manager) EndpointName(sandboxID string) string { return m.cfg.Prefix + sandboxID }

// SandboxID returns the sandbox ID encoded in one of our endpoint names.
func (m *Manager) SandboxID(endpointName string) (string, bool) {
	id, ok := strings.CutPrefix(endpointName, m.cfg.Prefix)
	return id, ok && id != ""
}

// Desired is the endpoint a sandbox should have.
type Desired struct {
	SandboxID string
	Namespace GUID // HCN namespace of the sandbox
	Policies  []PortMappingPolicy
	// DNS is the pod's own (its CRI sandbox config's); zero when not known
	// (then HNS fills in the node's).
	DNS DNS
}

// Outcome says what Ensure did.
type Outcome int

// Outcomes of Ensure.
const (
	Unchanged Outcome = iota // the right endpoint was already there
	Created                  // a new endpoint was created (maybe replacing others)
	Repaired                 // an existing endpoint was re-attached
)

func (o Outcome) String() string {
	return [...]string{"unchanged", "created", "repaired"}[o]
}

// EnsureNetwork returns the ID of the configured network, creating the
// network when configured to.
func (m *Manager) EnsureNetwork(ctx context.Context) (string, error) {
	if id := m.cachedNetwork(); id != "" {
		return id, nil
	}
	// Single flight: pods starting together must not each create a network
	// of the same name.
	m.netMu.Lock()
	defer m.netMu.Unlock()
	if id := m.cachedNetwork(); id != "" {
		return id, nil // created while we waited
	}
	n, err := m.svc.GetNetworkByName(ctx, m.cfg.Network.Name)
	created := false
	if ReadingOf("GetNetworkByName", err) == ReadAbsent && m.cfg.CreateNetwork {
		n, created, err = m.createNetwork(ctx)
	}
	if err == nil && !n.Type.Is(NetworkNAT) && !m.cfg.AllowCNINetwork {
		err = fmt.Errorf("network %q is %s, not NAT: the plugin's endpoint would get an address HNS picks from its subnet, which a CNI's "+
			"IPAM handing out that network's addresses does not know and may give to a pod again (kubernetes 74766); use a NAT network "+
			"(the default: hcn.network = \"nat\", created when missing), or set hcn.allow_cni_network = true if HNS hands out this "+
			"network's addresses itself: %w", n.Name, n.Type, ErrInvalid)
	}
	if err == nil && m.cfg.IPv6 && n.Type.Is(NetworkNAT) {
		err = fmt.Errorf("network %q is NAT, which does not support IPv6, and hcn.dual_stack asks for IPv6 mappings: %w", n.Name, ErrInvalid)
	}
	if err == nil && n.Type.Is(NetworkNAT) && !created { // one created is clear already (createNetwork)
		err = m.clearOf(ctx, *n, "used")
	}
	if err != nil {
		return "", stepErr(StepEnsureNetwork, m.cfg.Network.Name, err)
	}
	m.mu.Lock()
	m.networkID = n.ID
	m.gateway = cmp.Or(n.Gateway, m.cfg.Network.Gateway)
	m.mu.Unlock()
	return n.ID, nil
}

// clearOf refuses the NAT network n (to be used or created, as verb
// says) when its subnet overlaps another HNS network's, the cluster's
// ranges or the host's addresses (Overlaps): every mapped pod's
// compartment gets an on-link route for the subnet, so what it overlaps
// is unreachable from those pods. With AllowOverlap the overlaps are told
// to Shadowed instead. A listing that fails is the error: the network is
// looked up again at the next start.
func (m *Manager) clearOf(ctx context.Context, n Network, verb string) error {
	all, err := m.svc.ListNetworks(ctx)
	if err != nil {
		return fmt.Errorf("the other networks' subnets, which the NAT network's must stay clear of: %w", err)
	}
	hosts, err := m.hostPrefixes()
	if err != nil {
		return fmt.Errorf("the host's addresses, which the NAT network's subnet must stay clear of: %w", err)
	}
	over := Overlaps(n, all, m.cfg.ClusterRanges, hosts)
	switch {
	case len(over) == 0:
		return nil
	case m.cfg.AllowOverlap:
		if m.cfg.Shadowed != nil {
			m.cfg.Shadowed(n, over)
		}
		return nil
	}
	return fmt.Errorf("network %q cannot be %s: its subnet %s; every pod with a mapped host port gets an on-link route for the subnet "+
		"and could not reach what it overlaps: set hcn.subnet (and hcn.gateway) to a range clear of them, with hcn.cluster_ranges naming "+
		"the cluster's service and pod ranges (and a VPC's, where pods reach it), and recreate the network (nri-hcn-portmap cleanup, then "+
		"Remove-HnsNetwork), or set hcn.allow_subnet_overlap = true to use it as it is: %w", n.Name, verb, strings.Join(over, "; "), ErrInvalid)
}

// hostPrefixes are the host's address prefixes (HostPrefixes, else its
// interfaces').
func (m *Manager) hostPrefixes() ([]netip.Prefix, error) {
	if m.cfg.HostPrefixes != nil {
		return m.cfg.HostPrefixes()
	}
	return InterfacePrefixes()
}

// Overlaps says what the subnets of n, a NAT network, overlap: the
// subnets of the other HNS networks (a CNI's), the cluster's ranges and
// the host's address prefixes (hosts; but the subnet itself, which the
// host's vNIC on the NAT network carries: its gateway with the subnet's
// length, reasoned from WinNAT hosts' Get-NetIPAddress, unverified here).
// Each mapped pod's compartment gets an on-link route for n's subnet
// through the plugin's endpoint, so an address it overlaps is unreachable
// from that pod (HNS picks a NAT subnet in 172.16.0.0/12 where none is
// given: EKS's alternate service range 172.20.0.0/16, a 172.31.0.0/16
// VPC). Each entry names both ranges.
func Overlaps(n Network, others []Network, clusterRanges, hosts []netip.Prefix) []string {
	var out []string
	for _, s := range Prefixes(n.Subnets) {
		for _, h := range hosts {
			if h.Masked() != s && s.Overlaps(h) {
				out = append(out, fmt.Sprintf("%s overlaps the host's address %s", s, h))
			}
		}
		for _, o := range others {
			if strings.EqualFold(o.ID, n.ID) {
				continue
			}
			for _, os := range Prefixes(o.Subnets) {
				if s.Overlaps(os) {
					out = append(out, fmt.Sprintf("%s overlaps %s of HNS network %s", s, os, o.Name))
				}
			}
		}
		for _, r := range clusterRanges {
			if s.Overlaps(r) {
				out = append(out, fmt.Sprintf("%s overlaps the cluster's range %s (hcn.cluster_ranges)", s, r))
			}
		}
	}
	return out
}

// Prefixes parses CIDR prefixes, masked, skipping what does not parse.
func Prefixes(cidrs []string) []netip.Prefix {
	var out []netip.Prefix
	for _, c := range cidrs {
		if p, err := netip.ParsePrefix(c); err == nil {
			out = append(out, p.Masked())
		}
	}
	return out
}

// createNetwork creates the configured network. A NAT network configured
// without a subnet gets one the manager picks, clear of the host's
// addresses, of every HNS network and of the cluster's ranges: left to
// HNS, it lands where HNS likes (a /20 of 172.16.0.0/12, where EKS's
// alternate service range and VPC subnets live) and could only be warned
// about afterwards. Where HNS takes one NAT network only (docker/for-win
// 1384) and refuses a second, the NAT network that exists is used instead.
func (m *Manager) createNetwork(ctx context.Context) (*Network, bool, error) {
	spec, what := m.cfg.Network, "created"
	if spec.Type.Is(NetworkNAT) && spec.Subnet == "" {
		subnet, err := m.freeSubnet(ctx)
		if err != nil {
			return nil, false, err
		}
		spec.Subnet, spec.Gateway = subnet.String(), subnet.Addr().Next().String()
		what = "created with subnet " + spec.Subnet + ", picked clear of the host's addresses, of HNS's networks and of the cluster's ranges (hcn.cluster_ranges)"
	} else if spec.Type.Is(NetworkNAT) {
		// the configured subnet, before HNS makes it: a refused start
		// leaves HNS as it found it
		if err := m.clearOf(ctx, Network{Name: spec.Name, Type: spec.Type, Subnets: []string{spec.Subnet}}, "created"); err != nil {
			return nil, false, err
		}
	}
	n, err := m.svc.CreateNetwork(ctx, spec)
	if err == nil {
		m.announce(*n, what)
		return n, true, nil
	}
	if ReadingOf("CreateNetwork", err) != ReadTakeOne || !spec.Type.Is(NetworkNAT) {
		return nil, false, err
	}
	all, lerr := m.svc.ListNetworks(ctx)
	if lerr != nil {
		return nil, false, errors.Join(err, lerr)
	}
	for i := range all {
		if all[i].Type.Is(NetworkNAT) {
			m.announce(all[i], "HNS takes one NAT network and refused "+spec.Name+"; using the NAT network that exists")
			return &all[i], false, nil
		}
	}
	return nil, false, err
}

// freeSubnet is a /20 of 172.16.0.0/12 (where HNS places its own NAT
// networks) that overlaps no HNS network and no address of the host.
func (m *Manager) freeSubnet(ctx context.Context) (netip.Prefix, error) {
	nets, err := m.svc.ListNetworks(ctx)
	if err != nil {
		return netip.Prefix{}, err
	}
	taken, err := m.hostPrefixes()
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("the host's addresses: %w", err)
	}
	for _, n := range nets {
		taken = append(taken, Prefixes(n.Subnets)...)
	}
	taken = append(taken, m.cfg.ClusterRanges...)
	for a := netip.MustParseAddr("172.16.0.0"); netip.MustParsePrefix("172.16.0.0/12").Contains(a); {
		cand := netip.PrefixFrom(a, 20)
		if !slices.ContainsFunc(taken, cand.Overlaps) {
			return cand, nil
		}
		b := a.As4()
		b[2] += 16
		if b[2] == 0 {
			b[1]++
		}
		a = netip.AddrFrom4(b)
	}
	return netip.Prefix{}, fmt.Errorf("no /20 in 172.16.0.0/12 is clear of the host's addresses, HNS's networks and hcn.cluster_ranges "+
		"for the NAT network: set hcn.subnet and hcn.gateway: %w", ErrInvalid)
}

// InterfacePrefixes are the host's interface addresses with their masks.
func InterfacePrefixes() ([]netip.Prefix, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, err
	}
	var out []netip.Prefix
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil {
			out = append(out, p.Masked())
		}
	}
	return out, nil
}

func (m *Manager) announce(n Network, what string) {
	if m.cfg.Announce != nil {
		m.cfg.Announce(n, what)
	}
}

// routes returns the routes the plugin's endpoints get on the network.
func (m *Manager) routes() ([]Route, error) {
	m.mu.Lock()
	gw := m.gateway
	m.mu.Unlock()
	rs, err := m.cfg.DefaultRoute.Routes(gw, m.cfg.RouteMetric)
	if err != nil {
		return nil, stepErr(StepEnsureNetwork, m.cfg.Network.Name, err)
	}
	return rs, nil
}

func (m *Manager) cachedNetwork() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.networkID
}

func (m *Manager) forgetNetwork() {
	m.mu.Lock()
	m.networkID = ""
	m.mu.Unlock()
}

// Target is the network the sandbox's endpoint goes on, as a value for a
// plan (Diff): found (or created) when it is not known yet, and what HNS
// does with routes as far as it has been seen.
func (m *Manager) Target(ctx context.Context) (Target, error) {
	netID, err := m.EnsureNetwork(ctx)
	if err != nil {
		return Target{}, err
	}
	routes, err := m.routes()
	if err != nil {
		return Target{}, err
	}
	return Target{NetworkID: netID, Routes: routes, RoutesStored: m.routesStored(), OutboundNAT: m.cfg.OutboundNAT, Prefix: m.cfg.Prefix}, nil
}

// Ensure makes the sandbox's endpoint the one d asks for, as the
// controller does, for callers outside it (doctor's self-test): it looks
// the sandbox's endpoints up, plans (Diff) and applies. A network that
// went away under the plan is found (or created) again, and the plan made
// again, once.
func (m *Manager) Ensure(ctx context.Context, d Desired) (*Endpoint, Outcome, error) {
	for attempt := 1; ; attempt++ {
		existing, err := m.Lookup(ctx, d.SandboxID)
		if err != nil {
			return nil, Unchanged, err
		}
		t, err := m.Target(ctx)
		if err != nil {
			return nil, Unchanged, err
		}
		r, err := m.Apply(ctx, Diff(t.Spec(d), d.Namespace, existing, t.RoutesStored))
		if errors.Is(err, ErrNetworkGone) && attempt == 1 {
			continue
		}
		return r.Endpoint, r.Outcome, err
	}
}

// Remove deletes every endpoint of the sandbox, asking HNS which it has
// first, for callers outside the controller.
func (m *Manager) Remove(ctx context.Context, sandboxID string) (int, error) {
	eps, err := m.Lookup(ctx, sandboxID)
	if err != nil {
		return 0, err
	}
	r, err := m.Apply(ctx, Removal(eps))
	return r.Deleted, err
}

// ErrNetworkGone: the network an endpoint was being created on is gone
// (HNS restarted, an operator removed it): HNS changed under the plan,
// which is made again with the network found (or created) anew.
var ErrNetworkGone = fmt.Errorf("%w: the network is gone", ErrChanged)

// Result is what Apply did: the endpoint it kept or built (nil when the
// plan only deleted), how, and how many endpoints it deleted.
type Result struct {
	Endpoint *Endpoint
	Outcome  Outcome
	Deleted  int
}

// Apply takes a plan's steps (Diff, Removal), in order, each only when the
// one before succeeded, each answer read as its call's row of readings
// says, and fails when HNS answers otherwise than the step expects (a
// create on a network that is gone: ErrNetworkGone). On an error, Result
// says what was done before it.
func (m *Manager) Apply(ctx context.Context, steps []Step) (Result, error) {
	var r Result
	var made *Endpoint
	for _, s := range steps {
		switch s.Kind {
		case StepKeep:
			ep := s.Endpoint
			r.Endpoint, r.Outcome = &ep, Unchanged
		case StepDelete:
			if err := m.removeEndpoint(ctx, s.Endpoint); err != nil {
				return r, err
			}
			r.Deleted++
		case StepCreate:
			ep, err := m.create(ctx, s.Spec)
			if err != nil {
				return r, err
			}
			made, r.Outcome = ep, Created
		case StepAttach:
			ep := made
			if ep == nil {
				e := s.Endpoint
				ep, r.Outcome = &e, Repaired
			}
			if err := m.attach(ctx, ep, s.Namespace, s.Rollback); err != nil {
				return r, err
			}
			r.Endpoint = ep
		}
	}
	return r, nil
}

// create creates spec's endpoint, unattached. A create that failed but
// took effect (a lost answer, a timeout) is found by name: the endpoint is
// ours by name, and it also explains a port conflict with ourselves.
func (m *Manager) create(ctx context.Context, spec EndpointSpec) (*Endpoint, error) {
	ep, err := m.svc.CreateEndpoint(ctx, spec)
	if ReadingOf("CreateEndpoint", err) == ReadChanged {
		m.forgetNetwork()
		err = fmt.Errorf("network %s (%s): %w: %w", m.cfg.Network.Name, spec.NetworkID, ErrNetworkGone, err)
	}
	if err != nil {
		if ReadingOf("CreateEndpoint", err) == ReadBack {
			if late := m.findLate(ctx, spec); late != nil {
				return late, nil
			}
		}
		return nil, stepErr(StepCreateEndpoint, spec.Name+" on network "+m.cfg.Network.Name, err)
	}
	m.learnRoutes(spec, ep)
	return ep, nil
}

// attach attaches ep to ns; when that fails and rollback says so, ep is
// deleted again. An endpoint HNS says is attached already (an earlier
// attach that timed out here but that HNS completed) is read back:
// attached to ns, it is done, and the working endpoint is kept.
func (m *Manager) attach(ctx context.Context, ep *Endpoint, ns GUID, rollback bool) error {
	err := m.svc.AddNamespaceEndpoint(ctx, ns, ep.ID)
	if err != nil && ReadingOf("AddNamespaceEndpoint", err) == ReadBack {
		if back, gerr := m.svc.GetEndpoint(ctx, ep.ID); gerr == nil && back.Namespace == ns {
			ep.Namespace = ns
			return nil
		}
	}
	if err != nil {
		attachErr := stepErr(StepAttachEndpoint, ep.Name+" to namespace "+ns.String(), err)
		if !rollback {
			return attachErr
		}
		if derr := m.svc.DeleteEndpoint(ctx, ep.ID); ReadingOf("DeleteEndpoint", derr) != ReadDone {
			return errors.Join(attachErr, stepErr(StepDeleteEndpoint, ep.ID+" (rollback)", derr))
		}
		return attachErr
	}
	ep.Namespace = ns
	return nil
}

// findLate looks for an unattached endpoint of ours that a failed create
// left behind.
func (m *Manager) findLate(ctx context.Context, spec EndpointSpec) *Endpoint {
	eps, err := m.byName(ctx, spec.Name)
	if err != nil {
		return nil
	}
	stored := m.routesStored()
	for i := range eps {
		if Matches(eps[i], spec, stored) && eps[i].Namespace == "" {
			return &eps[i]
		}
	}
	return nil
}

// learnRoutes remembers what HNS did with the routes of an endpoint it
// created from spec: kept them, or not.
func (m *Manager) learnRoutes(spec EndpointSpec, created *Endpoint) {
	if len(spec.Routes) == 0 {
		return
	}
	kept := routesKept
	if len(created.Routes) == 0 {
		kept = routesNotKept
	}
	m.mu.Lock()
	m.kept = kept
	m.mu.Unlock()
}

// learnFromReadBack: an endpoint of ours HNS reads back with routes shows
// that this HNS stores them (a listing after a restart teaches what the
// creations before it did).
func (m *Manager) learnFromReadBack(eps []Endpoint) {
	for _, ep := range eps {
		if len(ep.Routes) > 0 {
			m.mu.Lock()
			if m.kept == routesUnknown {
				m.kept = routesKept
			}
			m.mu.Unlock()
			return
		}
	}
}

// routesStored: HNS has been seen to store an endpoint's routes.
func (m *Manager) routesStored() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.kept == routesKept
}

// What HNS does with an endpoint's routes, as seen at a creation or in a
// read-back.
const (
	routesUnknown = iota // not seen yet: a missing route is taken as HNS's doing (adopted)
	routesKept
	routesNotKept
)

// removeEndpoint detaches and deletes an endpoint. The delete is tried
// however the detach ended: an endpoint HNS detached already (the caller's
// view is older), or a detach failing in a way nobody mapped, must not keep
// holding its host port. The detach's error counts only when the delete
// fails too.
func (m *Manager) removeEndpoint(ctx context.Context, ep Endpoint) error {
	var detachErr error
	if ep.Namespace != "" {
		err := m.svc.RemoveNamespaceEndpoint(ctx, ep.Namespace, ep.ID)
		if ReadingOf("RemoveNamespaceEndpoint", err) != ReadDone {
			detachErr = stepErr(StepDetachEndpoint, ep.Name+" ("+ep.ID+") from namespace "+ep.Namespace.String(), err)
		}
	}
	err := m.svc.DeleteEndpoint(ctx, ep.ID)
	switch ReadingOf("DeleteEndpoint", err) {
	case ReadDone:
		return nil
	case ReadDetachSays:
		if detachErr == nil {
			break
		}
		return detachErr // still attached, as the detach failed: its error is the one that says why
	}
	return errors.Join(detachErr, stepErr(StepDeleteEndpoint, ep.Name+" ("+ep.ID+")", err))
}

// Owned lists our endpoints on the configured network: HNS filters by
// network, so only that network's endpoints are opened (a listing costs
// one HNS call per endpoint it opens). The network is made ready as a pod
// start would make it (EnsureNetwork: created where the manager creates
// it, so a listing at start-up finds the NAT network used in the
// configured one's stead; checked, so a network the plugin may not use is
// found at start, not at the first pod); no network, no endpoints of ours.
func (m *Manager) Owned(ctx context.Context) ([]Endpoint, error) {
	netID, err := m.EnsureNetwork(ctx)
	if errors.Is(err, ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, stepErr(StepListEndpoints, m.cfg.Network.Name, err)
	}
	all, err := listing(m.cfg.ListingAttempts, "ListEndpointsOfNetwork", func() ([]Endpoint, error) { return m.svc.ListEndpointsOfNetwork(ctx, netID) })
	if err != nil {
		return nil, stepErr(StepListEndpoints, "of network "+m.cfg.Network.Name, err)
	}
	owned := m.ours(all)
	m.learnFromReadBack(owned)
	return owned, nil
}

// OwnedEverywhere lists every endpoint whose name carries our prefix, on
// any network (cleanup, status: endpoints left on a network the
// configuration no longer names are shown and removed too). It opens every
// endpoint of the node.
func (m *Manager) OwnedEverywhere(ctx context.Context) ([]Endpoint, error) {
	all, err := listing(m.cfg.ListingAttempts, "ListEndpoints", func() ([]Endpoint, error) { return m.svc.ListEndpoints(ctx) })
	if err != nil {
		return nil, stepErr(StepListEndpoints, "", err)
	}
	return m.ours(all), nil
}

func (m *Manager) ours(all []Endpoint) []Endpoint {
	return slices.DeleteFunc(all, func(ep Endpoint) bool { _, ok := m.SandboxID(ep.Name); return !ok })
}

// Health reports whether HNS answers for the configured network: it must
// exist, unless the manager creates it with the first endpoint.
func (m *Manager) Health(ctx context.Context) error {
	_, err := m.svc.GetNetworkByName(Unobserved(ctx), m.cfg.Network.Name)
	if ReadingOf("GetNetworkByName", err) == ReadAbsent && m.cfg.CreateNetwork {
		return nil // reachable; the network comes with the first endpoint
	}
	return err
}

// NamespaceExists reports whether the HCN namespace exists.
func (m *Manager) NamespaceExists(ctx context.Context, id GUID) (bool, error) {
	_, err := m.svc.GetNamespace(ctx, id)
	switch ReadingOf("GetNamespace", err) {
	case ReadDone:
		return true, nil
	case ReadAbsent:
		return false, nil
	}
	return false, stepErr(StepLookupNS, id.String(), err)
}

// NetworkType is the type of the network with that ID, asked of HNS once
// per network ("" when HNS does not know it).
func (m *Manager) NetworkType(ctx context.Context, networkID string) (NetworkType, error) {
	id := CanonicalGUID(networkID)
	m.mu.Lock()
	t, ok := m.netTypes[id]
	m.mu.Unlock()
	if ok {
		return t, nil
	}
	all, err := m.svc.ListNetworks(ctx)
	if err != nil {
		return "", stepErr(StepEnsureNetwork, "list networks", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.netTypes == nil {
		m.netTypes = map[string]NetworkType{}
	}
	for _, n := range all {
		m.netTypes[CanonicalGUID(n.ID)] = n.Type
	}
	return m.netTypes[id], nil
}

// Neighbours returns the endpoints attached to namespace ns other than the
// sandbox's own: the CNI's endpoint, say, whose port mappings the pod has
// already. HNS is asked for the namespace's endpoints (hcsshim's
// GetNamespaceEndpointIds) and only those are opened, so a start costs the
// same on a node with many pods. An endpoint that goes meanwhile is not a
// neighbour; a namespace that is gone has none (the attach that follows
// finds it gone). The sandbox's own endpoints the caller knows (ours, by
// ID) are not opened: they are not neighbours.
func (m *Manager) Neighbours(ctx context.Context, ns GUID, sandboxID string, ours ...string) ([]Endpoint, error) {
	n, err := m.svc.GetNamespace(ctx, ns)
	if ReadingOf("GetNamespace", err) == ReadAbsent {
		return nil, nil
	}
	if err != nil {
		return nil, stepErr(StepLookupNS, ns.String(), err)
	}
	own := m.EndpointName(sandboxID)
	var out []Endpoint
	for _, id := range n.Endpoints {
		if slices.ContainsFunc(ours, func(o string) bool { return strings.EqualFold(o, id) }) {
			continue
		}
		ep, err := m.svc.GetEndpoint(ctx, id)
		switch {
		case ReadingOf("GetEndpoint", err) == ReadAbsent:
			continue
		case err != nil:
			return nil, stepErr(StepLookupEndpoint, id+" of namespace "+ns.String(), err)
		case ep.Name != own:
			out = append(out, *ep)
		}
	}
	return out, nil
}
