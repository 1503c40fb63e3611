package hcn

import (
	"net/netip"
	"slices"
	"strings"
)

// Target is the network the plugin's endpoints go on, as the manager knows
// it: what a sync reads as one fact before it plans a sandbox's endpoint
// (Manager.Target; no HNS call once the network is known).
type Target struct {
	NetworkID string
	// Routes are the routes an endpoint of ours gets there (the route
	// mode, through the network's gateway).
	Routes []Route
	// RoutesStored: HNS has been seen keeping an endpoint's routes, so an
	// endpoint read back without them is not the one asked for (older
	// builds drop them, and a fresh process has not learned which HNS this
	// is: then it is adopted, never rebuilt for what HNS reads back with
	// less).
	RoutesStored bool
	OutboundNAT  bool
	Prefix       string // the endpoint name's
}

// Spec is the endpoint d asks for on t.
func (t Target) Spec(d Desired) EndpointSpec {
	return EndpointSpec{Name: t.Prefix + d.SandboxID, NetworkID: t.NetworkID, PortMappings: d.Policies,
		OutboundNAT: t.OutboundNAT, Routes: slices.Clone(t.Routes), DNS: d.DNS.Clone()}
}

// StepKind is what one step does to HNS.
type StepKind int

// Step kinds.
const (
	StepKeep   StepKind = iota // the endpoint is the one asked for, attached where it belongs: nothing to do
	StepDelete                 // detach it (when attached) and delete it: gone is done
	StepCreate                 // create Spec's endpoint, unattached; a lost answer is read back by name
	StepAttach                 // attach Endpoint (zero: the one the create before made) to Namespace
)

func (k StepKind) String() string { return [...]string{"keep", "delete", "create", "attach"}[k] }

// Step is one step of a plan for HNS: the manager's Apply takes exactly
// these, in order, each only when the one before succeeded.
type Step struct {
	Kind      StepKind
	Endpoint  Endpoint     // keep, delete; attach of an endpoint that exists
	Spec      EndpointSpec // create
	Namespace GUID         // attach
	// Rollback (attach): the endpoint is deleted again when the attach
	// fails: an unattached endpoint of ours would hold its host ports for
	// nothing.
	Rollback bool
}

// Diff is the plan that makes existing (a sandbox's endpoints as HNS holds
// them) into the one endpoint spec describes, attached to ns, a function of
// values: one endpoint that matches is kept, preferring one attached where
// it belongs to one unattached (a late-created duplicate must not replace a
// working one), every other is deleted first (its host ports freed), and
// when none matches one is created and attached, rolled back if the attach
// fails. routesStored is Target's.
func Diff(spec EndpointSpec, ns GUID, existing []Endpoint, routesStored bool) []Step {
	keep := -1
	for _, where := range []GUID{ns, ""} {
		if keep < 0 {
			keep = slices.IndexFunc(existing, func(ep Endpoint) bool { return ep.Namespace == where && Matches(ep, spec, routesStored) })
		}
	}
	var steps []Step
	for i, ep := range existing {
		if i != keep {
			steps = append(steps, Step{Kind: StepDelete, Endpoint: ep})
		}
	}
	switch {
	case keep >= 0 && existing[keep].Namespace == ns:
		return append(steps, Step{Kind: StepKeep, Endpoint: existing[keep]})
	case keep >= 0:
		return append(steps, Step{Kind: StepAttach, Endpoint: existing[keep], Namespace: ns, Rollback: true})
	}
	return append(steps, Step{Kind: StepCreate, Spec: spec}, Step{Kind: StepAttach, Namespace: ns, Rollback: true})
}

// Removal is the plan that deletes every one of eps.
func Removal(eps []Endpoint) []Step {
	steps := make([]Step, 0, len(eps))
	for _, ep := range eps {
		steps = append(steps, Step{Kind: StepDelete, Endpoint: ep})
	}
	return steps
}

// Matches reports whether an existing endpoint (attached or not) is the
// one spec describes, in what decides its host ports: its network, its
// port mappings (protocol, ports, host IP, the local-routed and IPv6
// flags) and OutBoundNAT, and its routes as far as HNS keeps them: an
// endpoint read back without routes matches a spec with routes unless
// routesStored (HNS has been seen keeping them).
//
// DNS alone never rebuilds: a running sandbox's DNS does not change, so an
// endpoint whose DNS differs from the pod's was built by an earlier
// release (which sent none and got the node's) or filled in by HNS, and a
// rebuild would drop the pod's host ports to fix it. HNS offers no change
// of an endpoint's DNS in place (hcsshim's ModifyEndpointSettings takes
// port and policy resources only), so it is kept, and the caller reports
// it (DNS.Carries); the pod's next sandbox gets its own.
func Matches(ep Endpoint, spec EndpointSpec, routesStored bool) bool {
	if !strings.EqualFold(ep.NetworkID, spec.NetworkID) || ep.OutboundNAT != spec.OutboundNAT || !sameMappings(ep, spec) {
		return false
	}
	if len(ep.Routes) == 0 && len(spec.Routes) > 0 {
		return !routesStored
	}
	return SameRoutes(canonicalRoutes(ep.Routes), canonicalRoutes(spec.Routes))
}

// sameMappings: ep maps what spec asks for, as HNS applies it. Policies HNS
// read back in a form not decoded (ep.Undecoded) are taken for the ones
// missing when the count agrees: what this HNS writes is not known, and a
// rebuild would read back the same.
func sameMappings(ep Endpoint, spec EndpointSpec) bool {
	if len(ep.Undecoded) == 0 {
		return sameBehaviour(ep.PortMappings, spec.PortMappings)
	}
	if len(ep.PortMappings)+len(ep.Undecoded) != len(spec.PortMappings) {
		return false
	}
	want := slices.Clone(spec.PortMappings)
	for _, p := range ep.PortMappings {
		i := slices.IndexFunc(want, func(q PortMappingPolicy) bool { return sameBehaviour([]PortMappingPolicy{p}, []PortMappingPolicy{q}) })
		if i < 0 {
			return false
		}
		want = slices.Delete(want, i, i+1)
	}
	return true
}

// SameBehaviour compares port mappings as HNS applies them: a host IP in
// any spelling ("" and the unspecified address alike), and of the flags
// only the local-routed and IPv6 ones.
func SameBehaviour(a, b []PortMappingPolicy) bool { return sameBehaviour(a, b) }

func sameBehaviour(a, b []PortMappingPolicy) bool {
	norm := func(ps []PortMappingPolicy) []PortMappingPolicy {
		out := make([]PortMappingPolicy, len(ps))
		for i, p := range ps {
			p.VIP = canonicalVIP(p.VIP)
			p.Flags &= NatFlagsLocalRoutedVip | NatFlagsIPv6
			out[i] = p
		}
		return out
	}
	return SamePolicies(norm(a), norm(b))
}

// canonicalRoutes spells prefixes and next hops in one form.
func canonicalRoutes(rs []Route) []Route {
	out := make([]Route, len(rs))
	for i, r := range rs {
		if p, err := netip.ParsePrefix(r.DestinationPrefix); err == nil {
			r.DestinationPrefix = p.Masked().String()
		}
		if a, err := netip.ParseAddr(r.NextHop); err == nil {
			r.NextHop = a.Unmap().String()
		}
		out[i] = r
	}
	return out
}
