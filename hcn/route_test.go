package hcn_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn/hcnsim"
)

// podWithPrimary builds what the CNI leaves before the plugin runs: a
// namespace holding a CNI-like endpoint on its own network, created without
// routes (HNS gives it the implicit default route) and carrying the pod's
// DNS server.
func podWithPrimary(t *testing.T, sim *hcnsim.Sim) (hcn.GUID, *hcn.Endpoint) {
	t.Helper()
	cni, err := sim.CreateNetwork(ctx, hcn.NetworkSpec{Name: "cbr0", Type: hcn.NetworkL2Bridge, Subnet: "10.244.0.0/24", Gateway: "10.244.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	ns := sim.CreateNamespace("")
	primary, err := sim.CreateEndpoint(ctx, hcn.EndpointSpec{Name: "cni-primary", NetworkID: cni.ID, DNS: hcn.DNS{ServerList: []string{"10.96.0.10"}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := sim.AddNamespaceEndpoint(ctx, ns, primary.ID); err != nil {
		t.Fatal(err)
	}
	return ns, primary
}

func namespaceOf(t *testing.T, sim *hcnsim.Sim, id hcn.GUID) hcnsim.Namespace {
	t.Helper()
	for _, ns := range sim.State().Namespaces {
		if ns.ID == id {
			return ns
		}
	}
	t.Fatalf("namespace %s is gone", id)
	return hcnsim.Namespace{}
}

// TestEndpointNeverTakesThePodsDefaultRoute: with the CNI's endpoint in the
// pod's namespace, ours must leave the pod one lowest-metric default route,
// the CNI's, in every mode but hns, where HNS's implicit route competes at
// the same metric (shown, so the test can fail); and it carries the pod's
// own DNS, so the pod's resolvers stay the pod's (HNS would fill in the
// node's on an endpoint without DNS).
func TestEndpointNeverTakesThePodsDefaultRoute(t *testing.T) {
	const gw = "172.30.0.1"
	tests := []struct {
		mode   hcn.RouteMode
		metric uint16
		sent   []hcn.Route // what our endpoint carries
		// default routes of the namespace, lowest metric first
		table []hcn.Route
	}{
		{mode: hcn.RouteLowPriority, metric: 5000, sent: []hcn.Route{{DestinationPrefix: "0.0.0.0/0", NextHop: gw, Metric: 5000}},
			table: []hcn.Route{{DestinationPrefix: "0.0.0.0/0", NextHop: "10.244.0.1"}, {DestinationPrefix: "0.0.0.0/0", NextHop: gw, Metric: 5000}}},
		{mode: hcn.RouteLowPriority, metric: 7000, sent: []hcn.Route{{DestinationPrefix: "0.0.0.0/0", NextHop: gw, Metric: 7000}},
			table: []hcn.Route{{DestinationPrefix: "0.0.0.0/0", NextHop: "10.244.0.1"}, {DestinationPrefix: "0.0.0.0/0", NextHop: gw, Metric: 7000}}},
		{mode: hcn.RouteNone, sent: []hcn.Route{{DestinationPrefix: "0.0.0.0/0", NextHop: "0.0.0.0"}},
			table: []hcn.Route{{DestinationPrefix: "0.0.0.0/0", NextHop: "10.244.0.1"}}},
		{mode: hcn.RouteHNS,
			table: []hcn.Route{{DestinationPrefix: "0.0.0.0/0", NextHop: "10.244.0.1"}, {DestinationPrefix: "0.0.0.0/0", NextHop: gw}}},
		{mode: "", // the zero mode is HNS's: no route sent
			table: []hcn.Route{{DestinationPrefix: "0.0.0.0/0", NextHop: "10.244.0.1"}, {DestinationPrefix: "0.0.0.0/0", NextHop: gw}}},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("mode=%q,metric=%d", tc.mode, tc.metric), func(t *testing.T) {
			sim := hcnsim.New()
			ns, primary := podWithPrimary(t, sim)
			mgr := hcn.NewManager(sim, hcn.ManagerConfig{CreateNetwork: true, DefaultRoute: tc.mode, RouteMetric: tc.metric,
				Network: hcn.NetworkSpec{Name: "nat", Type: hcn.NetworkNAT, Subnet: "172.30.0.0/24", Gateway: gw}})
			ep, _, err := mgr.Ensure(ctx, hcn.Desired{SandboxID: "sb1", Namespace: ns, Policies: web, DNS: primary.DNS})
			if err != nil {
				t.Fatal(err)
			}
			if !hcn.SameRoutes(ep.Routes, tc.sent) || !slices.Equal(ep.DNS.ServerList, primary.DNS.ServerList) {
				t.Errorf("our endpoint carries routes %v, DNS %v; want routes %v and the pod's DNS %v", ep.Routes, ep.DNS, tc.sent, primary.DNS)
			}
			got := namespaceOf(t, sim, ns)
			defaults := got.DefaultRoutes()
			if len(defaults) == 0 {
				t.Fatalf("namespace has no default route: %+v", got)
			}
			if !slices.Equal(defaults, tc.table) {
				t.Errorf("namespace default routes = %v, want %v", defaults, tc.table)
			}
			for _, s := range got.DNSServers {
				if !slices.Contains(primary.DNS.ServerList, s) {
					t.Errorf("namespace DNS = %v: %s is not the pod's (%v)", got.DNSServers, s, primary.DNS.ServerList)
				}
			}
			lowest := 0
			for _, r := range defaults {
				if r.Metric == defaults[0].Metric {
					lowest++
				}
			}
			competing := lowest != 1 || defaults[0].NextHop != "10.244.0.1"
			if competing != (tc.mode == hcn.RouteHNS || tc.mode == "") {
				t.Errorf("%d default routes at the lowest metric, first via %s: the pod's own traffic %s", lowest, defaults[0].NextHop,
					map[bool]string{true: "may leave through our endpoint", false: "keeps the CNI's route"}[competing])
			}
			// idempotent: the endpoint HNS holds matches what the mode wants
			if _, out, err := mgr.Ensure(ctx, hcn.Desired{SandboxID: "sb1", Namespace: ns, Policies: web}); err != nil || out != hcn.Unchanged {
				t.Errorf("second Ensure = %v, %v; want unchanged", out, err)
			}
		})
	}
}

// TestRouteModeChangeReplacesEndpoints: an endpoint built under another
// mode is rebuilt, so a changed default_route reaches running pods. One
// built under hns (no routes) is told from one an HNS that stores no
// routes read back without them only once this HNS has shown that it
// stores routes (an endpoint of ours read back with routes, or the next one
// created): until then a restart adopts it (issue 30, 2).
func TestRouteModeChangeReplacesEndpoints(t *testing.T) {
	sim := hcnsim.New()
	ns, _ := podWithPrimary(t, sim)
	spec := hcn.NetworkSpec{Name: "nat", Type: hcn.NetworkNAT, Subnet: "172.30.0.0/24", Gateway: "172.30.0.1"}
	old := hcn.NewManager(sim, hcn.ManagerConfig{CreateNetwork: true, DefaultRoute: hcn.RouteHNS, Network: spec})
	if _, _, err := old.Ensure(ctx, hcn.Desired{SandboxID: "sb1", Namespace: ns, Policies: web}); err != nil {
		t.Fatal(err)
	}
	mgr := hcn.NewManager(sim, hcn.ManagerConfig{Network: spec, DefaultRoute: hcn.RouteLowPriority, RouteMetric: 5000})
	if _, out, err := mgr.Ensure(ctx, hcn.Desired{SandboxID: "sb1", Namespace: ns, Policies: web}); err != nil || out != hcn.Unchanged {
		t.Fatalf("Ensure before HNS showed it stores routes = %v, %v; want it adopted", out, err)
	}
	// another pod's endpoint: created with routes, read back with them
	if _, _, err := mgr.Ensure(ctx, hcn.Desired{SandboxID: "sb2", Namespace: sim.CreateNamespace(""), Policies: web2}); err != nil {
		t.Fatal(err)
	}
	ep, out, err := mgr.Ensure(ctx, hcn.Desired{SandboxID: "sb1", Namespace: ns, Policies: web})
	if err != nil || out != hcn.Created {
		t.Fatalf("Ensure under low-priority = %v, %v; want created", out, err)
	}
	if len(ep.Routes) != 1 || ep.Routes[0].Metric != 5000 {
		t.Errorf("rebuilt endpoint routes = %v", ep.Routes)
	}
}

// TestLowPriorityRouteNeedsAGateway: a network without a gateway HNS
// reports or the config names cannot take the route; the error says what to
// set, and nothing is created.
func TestLowPriorityRouteNeedsAGateway(t *testing.T) {
	sim := hcnsim.New()
	if _, err := sim.CreateNetwork(ctx, hcn.NetworkSpec{Name: "l2", Type: hcn.NetworkL2Bridge, Subnet: "10.1.0.0/24"}); err != nil {
		t.Fatal(err)
	}
	ns := sim.CreateNamespace("")
	mgr := hcn.NewManager(sim, hcn.ManagerConfig{Network: hcn.NetworkSpec{Name: "l2"}, AllowCNINetwork: true, DefaultRoute: hcn.RouteLowPriority, RouteMetric: 5000})
	_, _, err := mgr.Ensure(ctx, hcn.Desired{SandboxID: "sb1", Namespace: ns, Policies: web})
	if !errors.Is(err, hcn.ErrInvalid) || !strings.Contains(err.Error(), "hcn.gateway") || !strings.Contains(err.Error(), "l2") {
		t.Fatalf("err = %v, want an invalid-request error naming the network and hcn.gateway", err)
	}
	if st := sim.State(); len(st.Endpoints) != 0 {
		t.Errorf("endpoints created: %+v", st.Endpoints)
	}
	// the configured gateway is used when HNS reports none
	withGW := hcn.NewManager(sim, hcn.ManagerConfig{Network: hcn.NetworkSpec{Name: "l2", Gateway: "10.1.0.254"}, AllowCNINetwork: true,
		DefaultRoute: hcn.RouteLowPriority, RouteMetric: 5000})
	ep, _, err := withGW.Ensure(ctx, hcn.Desired{SandboxID: "sb1", Namespace: ns, Policies: web})
	if err != nil || len(ep.Routes) != 1 || ep.Routes[0].NextHop != "10.1.0.254" {
		t.Fatalf("Ensure with hcn.gateway = %+v, %v", ep, err)
	}
}

// Issue 30, 1: HNS fills in the node's DNS on an endpoint created without
// any (hcsshim#2369; the simulator's default, switchable). An endpoint
// without the pod's DNS would give the pod the node's resolvers beside its
// own; with the pod's, the pod's resolvers are the pod's under both
// variants. And the fill-in is no reason to rebuild.
func TestEndpointCarriesThePodsDNS(t *testing.T) {
	pod := hcn.DNS{ServerList: []string{"10.96.0.10"}, Search: []string{"default.svc.cluster.local", "svc.cluster.local"}, Options: []string{"ndots:5"}}
	for _, fill := range []bool{true, false} {
		for _, sent := range []hcn.DNS{pod, {}} {
			t.Run(fmt.Sprintf("fill=%v/pod-dns=%v", fill, !sent.IsZero()), func(t *testing.T) {
				sim := hcnsim.New()
				sim.SetRules(hcnsim.Rules{NoDNSFill: !fill})
				ns, _ := podWithPrimary(t, sim)
				mgr := hcn.NewManager(sim, hcn.ManagerConfig{CreateNetwork: true, DefaultRoute: hcn.RouteLowPriority, RouteMetric: 5000,
					Network: hcn.NetworkSpec{Name: "nat", Type: hcn.NetworkNAT, Subnet: "172.30.0.0/24", Gateway: "172.30.0.1"}})
				ep, _, err := mgr.Ensure(ctx, hcn.Desired{SandboxID: "sb1", Namespace: ns, Policies: web, DNS: sent})
				if err != nil {
					t.Fatal(err)
				}
				nodes := false
				for _, s := range namespaceOf(t, sim, ns).DNSServers {
					nodes = nodes || !slices.Contains(pod.ServerList, s)
				}
				if want := fill && sent.IsZero(); nodes != want {
					t.Errorf("the pod's resolvers %v hold the node's: %v, want %v", namespaceOf(t, sim, ns).DNSServers, nodes, want)
				}
				if !sent.IsZero() && (!slices.Equal(ep.DNS.Search, pod.Search) || !slices.Equal(ep.DNS.Options, pod.Options)) {
					t.Errorf("our endpoint's DNS %+v, want the pod's %+v", ep.DNS, pod)
				}
				if _, out, err := mgr.Ensure(ctx, hcn.Desired{SandboxID: "sb1", Namespace: ns, Policies: web, DNS: sent}); err != nil || out != hcn.Unchanged {
					t.Errorf("Ensure again = %v, %v: what HNS filled in made a rebuild", out, err)
				}
			})
		}
	}
}
