package hcn_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/config"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn/hcnsim"
)

var ctx = context.Background()

var (
	web  = []hcn.PortMappingPolicy{{Protocol: hcn.TCP, ExternalPort: 8080, InternalPort: 80, Flags: 1}}
	web2 = []hcn.PortMappingPolicy{{Protocol: hcn.TCP, ExternalPort: 8081, InternalPort: 80, Flags: 1}}
)

func setup(hns func() *hcnsim.Sim, create bool) (*hcnsim.Sim, *hcn.Manager) {
	sim := hns()
	mgr := newManager(sim, lowPriority(hcn.ManagerConfig{CreateNetwork: create,
		Network: hcn.NetworkSpec{Name: "nat", Type: hcn.NetworkNAT, Subnet: "172.30.0.0/24", Gateway: "172.30.0.1"}}))
	return sim, mgr
}

// lowPriority gives c the default configuration's route: low-priority, at
// metric 5000 (config.Default).
func lowPriority(c hcn.ManagerConfig) hcn.ManagerConfig {
	c.DefaultRoute, c.RouteMetric = hcn.RouteLowPriority, 5000
	return c
}

// TestManager runs every manager test once per variant of the HNS rules
// nobody has verified on a real node (hcnsim.Rules): the manager must be
// right whichever HNS does.
func TestManager(t *testing.T) {
	tests := []struct {
		name string
		fn   func(*testing.T, func() *hcnsim.Sim)
	}{
		{"EnsureCreatesAttachesAndIsIdempotent", testEnsureCreatesAttachesAndIsIdempotent},
		{"EnsureReplacesDifferentPoliciesAndDuplicates", testEnsureReplacesDifferentPoliciesAndDuplicates},
		{"EnsureReattachesDetachedEndpoint", testEnsureReattachesDetachedEndpoint},
		{"EnsureNetworkMissingNotCreated", testEnsureNetworkMissingNotCreated},
		{"EnsureRecreatesNetworkThatVanished", testEnsureRecreatesNetworkThatVanished},
		{"RemoveIsIdempotent", testRemoveIsIdempotent},
		{"RemoveAfterNamespaceDeleted", testRemoveAfterNamespaceDeleted},
		{"ForeignNameInOtherCaseIsLeftAlone", testForeignNameInOtherCaseIsLeftAlone},
		{"FaultAtEachStep", testFaultAtEachStep},
		{"RollbackFailureReportsBoth", testRollbackFailureReportsBoth},
		{"AttachToMissingNamespaceRollsBack", testAttachToMissingNamespaceRollsBack},
		{"OwnedAndSandboxID", testOwnedAndSandboxID},
		{"EnsureKeepsAttachedAndDropsStrays", testEnsureKeepsAttachedAndDropsStrays},
		{"BoundedGivesUpOnSlowHNS", testBoundedGivesUpOnSlowHNS},
		{"EnsureAdoptsEndpointOfALostCreateAnswer", testEnsureAdoptsEndpointOfALostCreateAnswer},
		{"EnsureAdoptsALostCreateOnARecreatedNetwork", testEnsureAdoptsALostCreateOnARecreatedNetwork},
		{"ConcurrentStartsCreateOneNetwork", testConcurrentStartsCreateOneNetwork},
		{"TimedOutCreateTakesEffectLate", testTimedOutCreateTakesEffectLate},
		{"EnsureComparesGUIDsInOneForm", testEnsureComparesGUIDsInOneForm},
		{"DualStackRefusesANATNetwork", testDualStackRefusesANATNetwork},
		{"ListingRacingADeleteIsNotFinal", testListingRacingADeleteIsNotFinal},
		{"OwnedOpensOnlyOurNetwork", testOwnedOpensOnlyOurNetwork},
		{"EndpointReadBackWithLessIsNotRebuilt", testEndpointReadBackWithLessIsNotRebuilt},
		{"FailedDetachStillDeletes", testFailedDetachStillDeletes},
		{"NetworkOtherThanNATNeedsConsent", testNetworkOtherThanNATNeedsConsent},
		{"SecondNATNetworkRefusedUsesTheOne", testSecondNATNetworkRefusedUsesTheOne},
		{"FlagChangeAloneRebuilds", testFlagChangeAloneRebuilds},
		{"ListingThatRacedADeleteIsTakenAgainBounded", testListingThatRacedADeleteIsTakenAgainBounded},
		{"OwnEndpointIsNoNeighbour", testOwnEndpointIsNoNeighbour},
		{"AttachHNSCompletedIsKept", testAttachHNSCompletedIsKept},
		{"OwnedEverywhereIsOursOnEveryNetworkAndNothingElse", testOwnedEverywhereIsOursOnEveryNetworkAndNothingElse},
		{"ARestartLearnsFromAListingThatHNSKeepsRoutes", testARestartLearnsFromAListingThatHNSKeepsRoutes},
	}
	for _, rules := range hcnsim.AllRules() {
		hns := func() *hcnsim.Sim {
			sim := hcnsim.New()
			sim.SetRules(rules)
			return sim
		}
		t.Run(rules.String(), func(t *testing.T) {
			for _, tc := range tests {
				t.Run(tc.name, func(t *testing.T) { tc.fn(t, hns) })
			}
		})
	}
}

// Issue 38: HNS's read-back of a network's type is compared in any case
// (Rules.TypeSpelling: "NAT", "nat", "Nat"): a NAT network is NAT, so a pod
// is mapped on it, dual stack refuses it, and the NAT network HNS already
// has is found when it takes one only; an L2Bridge network still needs
// consent.
func TestNetworkTypeReadBackInAnyCase(t *testing.T) {
	for _, spelling := range []string{"", "lower", "title"} {
		hns := func() *hcnsim.Sim {
			sim := hcnsim.New()
			sim.SetRules(hcnsim.Rules{TypeSpelling: spelling})
			return sim
		}
		t.Run(hcnsim.Rules{TypeSpelling: spelling}.String(), func(t *testing.T) {
			n, err := hns().CreateNetwork(ctx, hcn.NetworkSpec{Name: "nat", Type: hcn.NetworkNAT})
			if want := map[string]hcn.NetworkType{"": "NAT", "lower": "nat", "title": "Nat"}[spelling]; err != nil || n.Type != want {
				t.Fatalf("the simulator reads a NAT network back as %q (%v), want %q", n.Type, err, want)
			}
			t.Run("EnsureCreatesAttachesAndIsIdempotent", func(t *testing.T) { testEnsureCreatesAttachesAndIsIdempotent(t, hns) })
			t.Run("DualStackRefusesANATNetwork", func(t *testing.T) { testDualStackRefusesANATNetwork(t, hns) })
			t.Run("SecondNATNetworkRefusedUsesTheOne", func(t *testing.T) { testSecondNATNetworkRefusedUsesTheOne(t, hns) })
			t.Run("NetworkOtherThanNATNeedsConsent", func(t *testing.T) { testNetworkOtherThanNATNeedsConsent(t, hns) })
		})
	}
}

// ours returns the endpoints of the sandbox, failing on duplicates.
func ours(t *testing.T, sim *hcnsim.Sim, mgr *hcn.Manager, id string) *hcn.Endpoint {
	t.Helper()
	var found *hcn.Endpoint
	for _, ep := range sim.State().Endpoints {
		if ep.Name == mgr.EndpointName(id) {
			if found != nil {
				t.Fatalf("two endpoints for sandbox %s", id)
			}
			found = &ep
		}
	}
	return found
}

func testEnsureCreatesAttachesAndIsIdempotent(t *testing.T, hns func() *hcnsim.Sim) {
	sim, mgr := setup(hns, true)
	ns := sim.CreateNamespace("")
	ep, out, err := mgr.Ensure(ctx, hcn.Desired{SandboxID: "sb1", Namespace: ns, Policies: web})
	if err != nil || out != hcn.Created {
		t.Fatalf("Ensure = %v, %v; want created", out, err)
	}
	got := ours(t, sim, mgr, "sb1")
	if got == nil || got.ID != ep.ID || got.Namespace != ns || !hcn.SamePolicies(got.PortMappings, web) {
		t.Fatalf("HCN holds %+v, want endpoint %s attached to %s with %v", got, ep.ID, ns, web)
	}
	before := sim.Calls()
	if _, out, err := mgr.Ensure(ctx, hcn.Desired{SandboxID: "sb1", Namespace: ns, Policies: web}); err != nil || out != hcn.Unchanged {
		t.Fatalf("second Ensure = %v, %v; want unchanged", out, err)
	}
	after := sim.Calls()
	for _, op := range []string{hcnsim.OpCreateEndpoint, hcnsim.OpDeleteEndpoint, hcnsim.OpAddNamespaceEndpoint, hcnsim.OpRemoveNamespaceEndpoint} {
		if after[op] != before[op] {
			t.Errorf("second Ensure called %s", op)
		}
	}
}

func testEnsureReplacesDifferentPoliciesAndDuplicates(t *testing.T, hns func() *hcnsim.Sim) {
	sim, mgr := setup(hns, true)
	ns := sim.CreateNamespace("")
	old, _, err := mgr.Ensure(ctx, hcn.Desired{SandboxID: "sb1", Namespace: ns, Policies: web})
	if err != nil {
		t.Fatal(err)
	}
	// a stray duplicate, as a late HNS answer would leave
	netID, _ := mgr.EnsureNetwork(ctx)
	if _, err := sim.CreateEndpoint(ctx, hcn.EndpointSpec{Name: mgr.EndpointName("sb1"), NetworkID: netID}); err != nil {
		t.Fatal(err)
	}
	ep, out, err := mgr.Ensure(ctx, hcn.Desired{SandboxID: "sb1", Namespace: ns, Policies: web2})
	if err != nil || out != hcn.Created {
		t.Fatalf("Ensure with new policies = %v, %v", out, err)
	}
	got := ours(t, sim, mgr, "sb1")
	if got.ID == old.ID || got.ID != ep.ID || !hcn.SamePolicies(got.PortMappings, web2) || got.Namespace != ns {
		t.Fatalf("after replace HCN holds %+v", got)
	}
}

func testEnsureReattachesDetachedEndpoint(t *testing.T, hns func() *hcnsim.Sim) {
	sim, mgr := setup(hns, true)
	ns := sim.CreateNamespace("")
	netID, _ := mgr.EnsureNetwork(ctx)
	ep, _ := sim.CreateEndpoint(ctx, hcn.EndpointSpec{Name: mgr.EndpointName("sb1"), NetworkID: netID, PortMappings: web,
		Routes: []hcn.Route{{DestinationPrefix: "0.0.0.0/0", NextHop: "172.30.0.1", Metric: 5000}}})
	_, out, err := mgr.Ensure(ctx, hcn.Desired{SandboxID: "sb1", Namespace: ns, Policies: web})
	if err != nil || out != hcn.Repaired {
		t.Fatalf("Ensure = %v, %v; want repaired", out, err)
	}
	if got := ours(t, sim, mgr, "sb1"); got.ID != ep.ID || got.Namespace != ns {
		t.Fatalf("HCN holds %+v, want %s attached", got, ep.ID)
	}
}

func testEnsureNetworkMissingNotCreated(t *testing.T, hns func() *hcnsim.Sim) {
	_, mgr := setup(hns, false)
	_, _, err := mgr.Ensure(ctx, hcn.Desired{SandboxID: "sb1", Namespace: "ns", Policies: web})
	var se *hcn.StepError
	if !errors.As(err, &se) || se.Step != hcn.StepEnsureNetwork || !errors.Is(err, hcn.ErrNotFound) {
		t.Fatalf("err = %v, want a not-found ensure-network step error", err)
	}
	if !strings.Contains(err.Error(), `ensure network nat`) {
		t.Errorf("error %q does not name the network", err)
	}
}

func testEnsureRecreatesNetworkThatVanished(t *testing.T, hns func() *hcnsim.Sim) {
	sim, mgr := setup(hns, true)
	ns := sim.CreateNamespace("")
	if _, _, err := mgr.Ensure(ctx, hcn.Desired{SandboxID: "a", Namespace: ns, Policies: web}); err != nil {
		t.Fatal(err)
	}
	st := sim.State()
	sim.Reset() // HNS lost everything (a host reboot without persistence)
	sim.CreateNamespace(ns.String())
	if _, _, err := mgr.Ensure(ctx, hcn.Desired{SandboxID: "a", Namespace: ns, Policies: web}); err != nil {
		t.Fatalf("Ensure after the network vanished: %v", err)
	}
	if got := sim.State(); len(got.Networks) != 1 || got.Networks[0].ID == st.Networks[0].ID || len(got.Endpoints) != 1 {
		t.Errorf("state after recovery: %+v", got)
	}
}

func testRemoveIsIdempotent(t *testing.T, hns func() *hcnsim.Sim) {
	sim, mgr := setup(hns, true)
	ns := sim.CreateNamespace("")
	if _, _, err := mgr.Ensure(ctx, hcn.Desired{SandboxID: "sb1", Namespace: ns, Policies: web}); err != nil {
		t.Fatal(err)
	}
	if n, err := mgr.Remove(ctx, "sb1"); err != nil || n != 1 {
		t.Fatalf("Remove = %d, %v", n, err)
	}
	if n, err := mgr.Remove(ctx, "sb1"); err != nil || n != 0 {
		t.Fatalf("second Remove = %d, %v; want 0, nil", n, err)
	}
	if n, err := mgr.Remove(ctx, "never-existed"); err != nil || n != 0 {
		t.Fatalf("Remove of unknown sandbox = %d, %v", n, err)
	}
	if st := sim.State(); len(st.Endpoints) != 0 {
		t.Errorf("endpoints left: %+v", st.Endpoints)
	}
}

// An endpoint whose name differs from ours only in case is someone else's,
// even where HNS's name filter folds case.
func testForeignNameInOtherCaseIsLeftAlone(t *testing.T, hns func() *hcnsim.Sim) {
	sim, mgr := setup(hns, true)
	ns := sim.CreateNamespace("")
	netID, err := mgr.EnsureNetwork(ctx)
	if err != nil {
		t.Fatal(err)
	}
	foreign, err := sim.CreateEndpoint(ctx, hcn.EndpointSpec{Name: strings.ToUpper(mgr.EndpointName("sb1")), NetworkID: netID})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := mgr.Ensure(ctx, hcn.Desired{SandboxID: "sb1", Namespace: ns, Policies: web}); err != nil {
		t.Fatal(err)
	}
	if _, err := mgr.Remove(ctx, "sb1"); err != nil {
		t.Fatal(err)
	}
	st := sim.State()
	if len(st.Endpoints) != 1 || st.Endpoints[0].ID != foreign.ID {
		t.Fatalf("HNS holds %+v, want only the foreign endpoint %s", st.Endpoints, foreign.ID)
	}
}

func testRemoveAfterNamespaceDeleted(t *testing.T, hns func() *hcnsim.Sim) {
	sim, mgr := setup(hns, true)
	ns := sim.CreateNamespace("")
	if _, _, err := mgr.Ensure(ctx, hcn.Desired{SandboxID: "sb1", Namespace: ns, Policies: web}); err != nil {
		t.Fatal(err)
	}
	// containerd deleted the namespace first; our stale view still says attached
	eps, _ := sim.ListEndpointsByName(ctx, mgr.EndpointName("sb1"))
	if err := sim.DeleteNamespace(ns); err != nil {
		t.Fatal(err)
	}
	if _, err := mgr.Apply(ctx, hcn.Removal(eps[:1])); err != nil {
		t.Fatalf("RemoveEndpoint with a vanished namespace: %v", err)
	}
	if st := sim.State(); len(st.Endpoints) != 0 {
		t.Errorf("endpoints left: %+v", st.Endpoints)
	}
}

// TestFaultAtEachStep injects every kind of failure at every HCN call Ensure
// and Remove make: the error names the step, and nothing is left behind
// that was not there before.
func testFaultAtEachStep(t *testing.T, hns func() *hcnsim.Sim) {
	steps := map[string]string{
		hcnsim.OpListEndpointsByName:     hcn.StepLookupEndpoint,
		hcnsim.OpGetNetworkByName:        hcn.StepEnsureNetwork,
		hcnsim.OpCreateNetwork:           hcn.StepEnsureNetwork,
		hcnsim.OpCreateEndpoint:          hcn.StepCreateEndpoint,
		hcnsim.OpAddNamespaceEndpoint:    hcn.StepAttachEndpoint,
		hcnsim.OpRemoveNamespaceEndpoint: hcn.StepDetachEndpoint,
		hcnsim.OpDeleteEndpoint:          hcn.StepDeleteEndpoint,
	}
	for op, step := range steps {
		for _, kind := range []string{"internal", "unavailable", "port-in-use", "invalid"} {
			t.Run(fmt.Sprintf("%s/%s", op, kind), func(t *testing.T) {
				sim, mgr := setup(hns, true)
				ns := sim.CreateNamespace("")
				removal := op == hcnsim.OpRemoveNamespaceEndpoint || op == hcnsim.OpDeleteEndpoint
				if removal {
					if _, _, err := mgr.Ensure(ctx, hcn.Desired{SandboxID: "sb1", Namespace: ns, Policies: web}); err != nil {
						t.Fatal(err)
					}
				}
				if err := sim.InjectFault(hcnsim.Fault{Op: op, Kind: kind}); err != nil {
					t.Fatal(err)
				}
				var err error
				if removal {
					_, err = mgr.Remove(ctx, "sb1")
				} else {
					_, _, err = mgr.Ensure(ctx, hcn.Desired{SandboxID: "sb1", Namespace: ns, Policies: web})
				}
				if err == nil && op == hcnsim.OpRemoveNamespaceEndpoint && sim.Rules().DeleteAttached {
					// the delete is tried whatever the detach did, and HNS
					// deletes an attached endpoint under this rule: done
					if got := ours(t, sim, mgr, "sb1"); got != nil {
						t.Fatalf("Remove succeeded, yet %+v is left", got)
					}
					return
				}
				var se *hcn.StepError
				if !errors.As(err, &se) || se.Step != step {
					t.Fatalf("err = %v, want a %q step error", err, step)
				}
				if !strings.Contains(err.Error(), step) || !strings.Contains(err.Error(), "injected fault in "+op) {
					t.Errorf("error %q does not name the step and the failed call", err)
				}
				got := ours(t, sim, mgr, "sb1")
				if removal {
					// nothing was lost: the endpoint is still there, and a retry cleans up
					if got == nil {
						t.Fatal("endpoint vanished although removal failed")
					}
					if _, err := mgr.Remove(ctx, "sb1"); err != nil {
						t.Fatalf("retry Remove: %v", err)
					}
					if ours(t, sim, mgr, "sb1") != nil {
						t.Fatal("endpoint left after retry")
					}
					return
				}
				if got != nil {
					t.Fatalf("failed Ensure left endpoint %+v behind", got)
				}
				// and a retry converges
				if _, _, err := mgr.Ensure(ctx, hcn.Desired{SandboxID: "sb1", Namespace: ns, Policies: web}); err != nil {
					t.Fatalf("retry Ensure: %v", err)
				}
				if got := ours(t, sim, mgr, "sb1"); got == nil || got.Namespace != ns {
					t.Fatalf("after retry HCN holds %+v", got)
				}
			})
		}
	}
}

func testRollbackFailureReportsBoth(t *testing.T, hns func() *hcnsim.Sim) {
	sim, mgr := setup(hns, true)
	ns := sim.CreateNamespace("")
	_ = sim.InjectFault(hcnsim.Fault{Op: hcnsim.OpAddNamespaceEndpoint, Kind: "internal"})
	_ = sim.InjectFault(hcnsim.Fault{Op: hcnsim.OpDeleteEndpoint, Kind: "unavailable"})
	_, _, err := mgr.Ensure(ctx, hcn.Desired{SandboxID: "sb1", Namespace: ns, Policies: web})
	if err == nil || !strings.Contains(err.Error(), hcn.StepAttachEndpoint) || !strings.Contains(err.Error(), "rollback") {
		t.Fatalf("err = %v, want the attach failure and the failed rollback", err)
	}
	// the leftover is ours by name: the next Ensure replaces it
	if _, _, err := mgr.Ensure(ctx, hcn.Desired{SandboxID: "sb1", Namespace: ns, Policies: web}); err != nil {
		t.Fatal(err)
	}
	if n := len(sim.State().Endpoints); n != 1 {
		t.Errorf("%d endpoints, want 1", n)
	}
}

func testAttachToMissingNamespaceRollsBack(t *testing.T, hns func() *hcnsim.Sim) {
	sim, mgr := setup(hns, true)
	_, _, err := mgr.Ensure(ctx, hcn.Desired{SandboxID: "sb1", Namespace: "6B1F3E2A-0000-0000-0000-000000000000", Policies: web})
	if !errors.Is(err, hcn.ErrNotFound) {
		t.Fatalf("err = %v, want ErrNotFound", err)
	}
	if n := len(sim.State().Endpoints); n != 0 {
		t.Errorf("%d endpoints left after a failed attach", n)
	}
}

func testOwnedAndSandboxID(t *testing.T, hns func() *hcnsim.Sim) {
	sim, mgr := setup(hns, true)
	ns := sim.CreateNamespace("")
	netID, _ := mgr.EnsureNetwork(ctx)
	_, _ = sim.CreateEndpoint(ctx, hcn.EndpointSpec{Name: "someone-elses", NetworkID: netID})
	if _, _, err := mgr.Ensure(ctx, hcn.Desired{SandboxID: "sb1", Namespace: ns, Policies: web}); err != nil {
		t.Fatal(err)
	}
	eps, err := mgr.Owned(ctx)
	if err != nil || len(eps) != 1 {
		t.Fatalf("Owned = %+v, %v; want only ours", eps, err)
	}
	if id, ok := mgr.SandboxID(eps[0].Name); !ok || id != "sb1" {
		t.Errorf("SandboxID(%q) = %q, %v", eps[0].Name, id, ok)
	}
	if _, ok := mgr.SandboxID(config.EndpointPrefix); ok {
		t.Error("bare prefix taken as ours")
	}
}

func testEnsureKeepsAttachedAndDropsStrays(t *testing.T, hns func() *hcnsim.Sim) {
	sim, mgr := setup(hns, true)
	ns := sim.CreateNamespace("")
	good, _, err := mgr.Ensure(ctx, hcn.Desired{SandboxID: "sb1", Namespace: ns, Policies: web})
	if err != nil {
		t.Fatal(err)
	}
	// an identical, unattached endpoint a timed-out create left behind; it
	// may sort first, it must still be the one to go
	netID, _ := mgr.EnsureNetwork(ctx)
	for range 3 {
		if _, err := sim.CreateEndpoint(ctx, hcn.EndpointSpec{Name: mgr.EndpointName("sb1"), NetworkID: netID}); err != nil {
			t.Fatal(err)
		}
	}
	ep, out, err := mgr.Ensure(ctx, hcn.Desired{SandboxID: "sb1", Namespace: ns, Policies: web})
	if err != nil || out != hcn.Unchanged || ep.ID != good.ID {
		t.Fatalf("Ensure = %+v, %v, %v; want the attached %s kept", ep, out, err, good.ID)
	}
	if got := ours(t, sim, mgr, "sb1"); got.ID != good.ID {
		t.Fatalf("HCN holds %+v", got)
	}
}

func testBoundedGivesUpOnSlowHNS(t *testing.T, hns func() *hcnsim.Sim) {
	sim := hns()
	sim.SetLatency(time.Second)
	svc := hcn.Bounded(sim, 20*time.Millisecond)
	_, err := svc.ListEndpoints(ctx)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "ListEndpoints") {
		t.Fatalf("err = %v, want a deadline error naming the call", err)
	}
	sim.SetLatency(0)
	if _, err := svc.ListEndpoints(ctx); err != nil {
		t.Fatalf("fast call: %v", err)
	}
}

func testEnsureAdoptsEndpointOfALostCreateAnswer(t *testing.T, hns func() *hcnsim.Sim) {
	sim, mgr := setup(hns, true)
	ns := sim.CreateNamespace("")
	// HNS creates the endpoint but the answer is lost
	_ = sim.InjectFault(hcnsim.Fault{Op: hcnsim.OpCreateEndpoint, Kind: "unavailable", After: true})
	ep, out, err := mgr.Ensure(ctx, hcn.Desired{SandboxID: "sb1", Namespace: ns, Policies: web})
	if err != nil || out != hcn.Created {
		t.Fatalf("Ensure = %v, %v", out, err)
	}
	if got := ours(t, sim, mgr, "sb1"); got == nil || got.ID != ep.ID || got.Namespace != ns {
		t.Fatalf("HCN holds %+v, want the late endpoint attached", got)
	}
}

// The network vanished and was created again, and the create on the new
// network lost its answer: the late endpoint is recognized on the new
// network, not compared with the old one.
func testEnsureAdoptsALostCreateOnARecreatedNetwork(t *testing.T, hns func() *hcnsim.Sim) {
	sim, mgr := setup(hns, true)
	ns := sim.CreateNamespace("")
	if _, _, err := mgr.Ensure(ctx, hcn.Desired{SandboxID: "sb1", Namespace: ns, Policies: web}); err != nil {
		t.Fatal(err)
	}
	sim.Reset()
	sim.CreateNamespace(ns.String())
	// the first create finds the network gone; the second takes effect and
	// loses its answer
	_ = sim.InjectFault(hcnsim.Fault{Op: hcnsim.OpCreateEndpoint, Kind: "unavailable", After: true, Count: 2})
	ep, out, err := mgr.Ensure(ctx, hcn.Desired{SandboxID: "sb2", Namespace: ns, Policies: web2})
	if err != nil || out != hcn.Created {
		t.Fatalf("Ensure = %v, %v", out, err)
	}
	if got := ours(t, sim, mgr, "sb2"); got == nil || got.ID != ep.ID || got.Namespace != ns || got.NetworkID != sim.State().Networks[0].ID {
		t.Fatalf("HCN holds %+v, want the late endpoint on the new network, attached", got)
	}
}

// Regression (load and faults, 1): pods starting together with
// create_network created one network each, since HNS allows duplicate names.
func testConcurrentStartsCreateOneNetwork(t *testing.T, hns func() *hcnsim.Sim) {
	sim, mgr := setup(hns, true)
	sim.SetLatency(5 * time.Millisecond) // lookups overlap
	var wg sync.WaitGroup
	for i := range 8 {
		ns := sim.CreateNamespace("")
		wg.Go(func() {
			p := []hcn.PortMappingPolicy{{Protocol: hcn.TCP, ExternalPort: uint16(9000 + i), InternalPort: 80}}
			if _, _, err := mgr.Ensure(ctx, hcn.Desired{SandboxID: fmt.Sprint("sb", i), Namespace: ns, Policies: p}); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if n := len(sim.State().Networks); n != 1 {
		t.Fatalf("%d networks, want 1: %+v", n, sim.State().Networks)
	}
}

// Load and faults, 9: a create the caller gave up on still takes effect
// (as in HNS); the next Ensure adopts it instead of creating a second, and a
// Remove of a stopped pod deletes it.
func testTimedOutCreateTakesEffectLate(t *testing.T, hns func() *hcnsim.Sim) {
	sim := hns()
	mgr := newManager(hcn.Bounded(sim, 20*time.Millisecond), hcn.ManagerConfig{CreateNetwork: true,
		Network: hcn.NetworkSpec{Name: "nat", Type: hcn.NetworkNAT}})
	if _, err := mgr.EnsureNetwork(ctx); err != nil {
		t.Fatal(err)
	}
	ns := sim.CreateNamespace("")
	sim.SetOpLatency(hcnsim.OpCreateEndpoint, 60*time.Millisecond)
	_, _, err := mgr.Ensure(ctx, hcn.Desired{SandboxID: "late", Namespace: ns, Policies: web})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Ensure = %v, want a deadline error", err)
	}
	sim.WaitLate()
	sim.SetOpLatency(hcnsim.OpCreateEndpoint, 0)
	var created []hcn.Endpoint
	for _, ep := range sim.State().Endpoints {
		if ep.Name == mgr.EndpointName("late") {
			created = append(created, ep)
		}
	}
	if len(created) != 1 || created[0].Namespace != "" {
		t.Fatalf("after the late answer HCN holds %+v, want one unattached endpoint", created)
	}
	ep, out, err := mgr.Ensure(ctx, hcn.Desired{SandboxID: "late", Namespace: ns, Policies: web})
	if err != nil || out != hcn.Repaired || ep.ID != created[0].ID {
		t.Fatalf("retry = %+v, %v, %v; want the late endpoint adopted and attached", ep, out, err)
	}
	if got := ours(t, sim, mgr, "late"); got == nil || got.Namespace != ns {
		t.Fatalf("HCN holds %+v", got)
	}
	if n, err := mgr.Remove(ctx, "late"); err != nil || n != 1 || len(sim.State().Endpoints) != 0 {
		t.Fatalf("Remove = %d, %v; HCN holds %+v", n, err, sim.State().Endpoints)
	}
}

// Issue 15, GUIDs: the OCI spec may spell the namespace GUID in lower case
// or in braces while HNS reports it in upper case; read through ParseGUID
// at the boundary they are one GUID. The endpoint is in place
// after the first Ensure; a second one must not "repair" it again (every
// resync would otherwise delete and recreate a healthy endpoint).
func testEnsureComparesGUIDsInOneForm(t *testing.T, hns func() *hcnsim.Sim) {
	sim, mgr := setup(hns, true)
	ns := sim.CreateNamespace("")
	spelled := hcn.ParseGUID("{" + strings.ToLower(ns.String()) + "}") // as a spec may write it, read at the boundary
	first, out, err := mgr.Ensure(ctx, hcn.Desired{SandboxID: "g", Namespace: spelled, Policies: web})
	if err != nil || out != hcn.Created {
		t.Fatalf("Ensure = %v, %v", out, err)
	}
	if _, err := mgr.Owned(ctx); err != nil { // what a resync reads back from HNS
		t.Fatal(err)
	}
	again, out, err := mgr.Ensure(ctx, hcn.Desired{SandboxID: "g", Namespace: spelled, Policies: web})
	if err != nil || out != hcn.Unchanged || again.ID != first.ID {
		t.Fatalf("second Ensure = %v, %v (endpoint %s, was %s): the same namespace spelled differently", out, err, again.ID, first.ID)
	}
}

// Issue 10: dual stack on an existing NAT network (NAT does not support
// IPv6) is refused with an error that says so, naming the network.
func testDualStackRefusesANATNetwork(t *testing.T, hns func() *hcnsim.Sim) {
	sim := hns()
	if _, err := sim.CreateNetwork(ctx, hcn.NetworkSpec{Name: "nat", Type: hcn.NetworkNAT}); err != nil {
		t.Fatal(err)
	}
	if _, err := sim.CreateNetwork(ctx, hcn.NetworkSpec{Name: "l2", Type: hcn.NetworkL2Bridge, Subnet: "10.1.0.0/24"}); err != nil {
		t.Fatal(err)
	}
	mgr := newManager(sim, hcn.ManagerConfig{Network: hcn.NetworkSpec{Name: "nat"}, IPv6: true})
	_, err := mgr.EnsureNetwork(ctx)
	if !errors.Is(err, hcn.ErrInvalid) || !strings.Contains(err.Error(), `network "nat" is NAT, which does not support IPv6`) {
		t.Fatalf("EnsureNetwork = %v", err)
	}
	if _, err := newManager(sim, hcn.ManagerConfig{Network: hcn.NetworkSpec{Name: "l2"}, IPv6: true, AllowCNINetwork: true}).EnsureNetwork(ctx); err != nil {
		t.Fatalf("L2Bridge: %v", err)
	}
	if _, err := newManager(sim, hcn.ManagerConfig{Network: hcn.NetworkSpec{Name: "nat"}}).EnsureNetwork(ctx); err != nil {
		t.Fatalf("NAT without dual stack: %v", err)
	}
}

// Issue 24, 3: hcsshim lists by enumerating IDs and opening each; an
// endpoint deleted in between fails the whole listing with not-found. That
// is not the final not-found of a missing object: the listing is taken
// again (and, if HNS keeps changing, the error says HNS changed, which is
// retried).
func testListingRacingADeleteIsNotFinal(t *testing.T, hns func() *hcnsim.Sim) {
	sim, mgr := setup(hns, true)
	var eps []*hcn.Endpoint
	for i := range 4 {
		ns := sim.CreateNamespace("")
		ep, _, err := mgr.Ensure(ctx, hcn.Desired{SandboxID: fmt.Sprint("sb", i), Namespace: ns,
			Policies: []hcn.PortMappingPolicy{{Protocol: hcn.TCP, ExternalPort: uint16(8100 + i), InternalPort: 80}}})
		if err != nil {
			t.Fatal(err)
		}
		eps = append(eps, ep)
	}
	for _, op := range []string{hcnsim.OpListEndpoints, hcnsim.OpListEndpointsOfNetwork} {
		sim.SetOpLatency(op, 20*time.Millisecond) // each endpoint opened costs this
	}
	done := make(chan error, 1)
	go func() {
		_, err := mgr.Owned(ctx)
		done <- err
	}()
	time.Sleep(30 * time.Millisecond) // the listing has enumerated and is opening
	last := eps[len(eps)-1]
	_ = sim.RemoveNamespaceEndpoint(ctx, last.Namespace, last.ID)
	if err := sim.DeleteEndpoint(ctx, last.ID); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil && hcn.Permanent(err) {
		t.Fatalf("Owned = %v: a listing that raced a delete is final", err)
	}
}

// Issue 24, 10: a listing opens every endpoint it enumerates, one HNS call
// each. Ours are on our network: the listing asks HNS for that network's
// only, so a node full of other endpoints (the CNI's) costs it nothing.
func testOwnedOpensOnlyOurNetwork(t *testing.T, hns func() *hcnsim.Sim) {
	sim := hns()
	mgr := newManager(hcn.Bounded(sim, 200*time.Millisecond), hcn.ManagerConfig{CreateNetwork: true,
		Network: hcn.NetworkSpec{Name: "nat", Type: hcn.NetworkNAT, Subnet: "172.30.0.0/24", Gateway: "172.30.0.1"}})
	cni, err := sim.CreateNetwork(ctx, hcn.NetworkSpec{Name: "cbr0", Type: hcn.NetworkL2Bridge, Subnet: "10.244.0.0/16"})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		if _, err := sim.CreateEndpoint(ctx, hcn.EndpointSpec{Name: fmt.Sprint("cni-", i), NetworkID: cni.ID}); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := mgr.Ensure(ctx, hcn.Desired{SandboxID: "sb1", Namespace: sim.CreateNamespace(""), Policies: web}); err != nil {
		t.Fatal(err)
	}
	for _, op := range []string{hcnsim.OpListEndpoints, hcnsim.OpListEndpointsOfNetwork} {
		sim.SetOpLatency(op, 5*time.Millisecond) // 100 endpoints: 500 ms, over the call's 200 ms
	}
	eps, err := mgr.Owned(ctx)
	if err != nil || len(eps) != 1 {
		t.Fatalf("Owned = %+v, %v; want our one endpoint within the call's time limit", eps, err)
	}
}

// Issue 24, 2: what HNS reads back of an endpoint is compared with what was
// sent in what decides its behaviour, against what HNS said at creation: an
// HNS that does not store routes (older builds) reads every endpoint back
// without them, and that is no reason to delete and re-create it (the host
// port would drop at every resync). Under both variants of the rule, after
// a restart too (a new manager): at most one rebuild, while it learns what
// this HNS keeps; and a real change (other mappings) is still a rebuild.
func testEndpointReadBackWithLessIsNotRebuilt(t *testing.T, hns func() *hcnsim.Sim) {
	for _, dropped := range []bool{false, true} {
		t.Run(fmt.Sprintf("routes-dropped=%v", dropped), func(t *testing.T) {
			sim, mgr := setup(hns, true)
			r := sim.Rules()
			r.DropRoutes = dropped
			sim.SetRules(r)
			ns := sim.CreateNamespace("")
			first, out, err := mgr.Ensure(ctx, hcn.Desired{SandboxID: "sb1", Namespace: ns, Policies: web})
			if err != nil || out != hcn.Created {
				t.Fatalf("Ensure = %v, %v", out, err)
			}
			for range 3 { // the resyncs
				if ep, out, err := mgr.Ensure(ctx, hcn.Desired{SandboxID: "sb1", Namespace: ns, Policies: web}); err != nil || out != hcn.Unchanged || ep.ID != first.ID {
					t.Fatalf("Ensure again = %v, %v: rebuilt what HNS keeps as it can", out, err)
				}
			}
			restarted := newManager(sim, lowPriority(hcn.ManagerConfig{CreateNetwork: true,
				Network: hcn.NetworkSpec{Name: "nat", Type: hcn.NetworkNAT, Subnet: "172.30.0.0/24", Gateway: "172.30.0.1"}}))
			before := sim.Calls()[hcnsim.OpCreateEndpoint]
			for range 3 {
				if _, _, err := restarted.Ensure(ctx, hcn.Desired{SandboxID: "sb1", Namespace: ns, Policies: web}); err != nil {
					t.Fatal(err)
				}
			}
			if n := sim.Calls()[hcnsim.OpCreateEndpoint] - before; n > 1 {
				t.Fatalf("after a restart %d rebuilds, want at most one", n)
			}
			if _, out, err := restarted.Ensure(ctx, hcn.Desired{SandboxID: "sb1", Namespace: ns, Policies: web2}); err != nil || out != hcn.Created {
				t.Fatalf("Ensure with other mappings = %v, %v; want it replaced", out, err)
			}
		})
	}
}

// Issue 24, 8: a detach that fails in a way nobody mapped does not stop the
// removal: the delete is tried, and an endpoint that is in fact not
// attached any more (HNS detached it; the caller's view is older) goes.
func testFailedDetachStillDeletes(t *testing.T, hns func() *hcnsim.Sim) {
	sim, mgr := setup(hns, true)
	ns := sim.CreateNamespace("")
	ep, _, err := mgr.Ensure(ctx, hcn.Desired{SandboxID: "sb1", Namespace: ns, Policies: web})
	if err != nil {
		t.Fatal(err)
	}
	view := *ep
	if err := sim.RemoveNamespaceEndpoint(ctx, ns, ep.ID); err != nil { // behind the caller's view
		t.Fatal(err)
	}
	_ = sim.InjectFault(hcnsim.Fault{Op: hcnsim.OpRemoveNamespaceEndpoint, Kind: "internal"})
	if _, err := mgr.Apply(ctx, hcn.Removal([]hcn.Endpoint{view})); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if got := ours(t, sim, mgr, "sb1"); got != nil {
		t.Fatalf("left %+v", got)
	}
}

// Issue 24, 4: our endpoint gets its address from HNS's view of the
// network's subnet; on a network whose addresses a CNI's IPAM hands out
// that address may go to a pod again. Endpoints go on NAT networks (HNS's
// own IPAM) unless the operator says the network is safe; the refusal
// names the network and the way out, and nothing is created.
func testNetworkOtherThanNATNeedsConsent(t *testing.T, hns func() *hcnsim.Sim) {
	sim := hns()
	if _, err := sim.CreateNetwork(ctx, hcn.NetworkSpec{Name: "cbr0", Type: hcn.NetworkL2Bridge, Subnet: "10.244.0.0/16"}); err != nil {
		t.Fatal(err)
	}
	ns := sim.CreateNamespace("")
	mgr := newManager(sim, hcn.ManagerConfig{Network: hcn.NetworkSpec{Name: "cbr0"}})
	_, _, err := mgr.Ensure(ctx, hcn.Desired{SandboxID: "sb1", Namespace: ns, Policies: web})
	if !errors.Is(err, hcn.ErrInvalid) || !strings.Contains(strings.ToLower(err.Error()), `network "cbr0" is l2bridge`) || !strings.Contains(err.Error(), "hcn.allow_cni_network") {
		t.Fatalf("Ensure on a CNI's L2Bridge network = %v", err)
	}
	if n := len(sim.State().Endpoints); n != 0 {
		t.Fatalf("%d endpoints created", n)
	}
	allowed := newManager(sim, hcn.ManagerConfig{Network: hcn.NetworkSpec{Name: "cbr0"}, AllowCNINetwork: true, DefaultRoute: hcn.RouteNone})
	if _, _, err := allowed.Ensure(ctx, hcn.Desired{SandboxID: "sb1", Namespace: ns, Policies: web}); err != nil {
		t.Fatalf("with consent: %v", err)
	}
}

// Issue 24, 5: the plugin creates its NAT network where none of that name
// exists, and says so; where HNS takes one NAT network only and refuses a
// second (docker/for-win 1384), the NAT network that exists is used.
func testSecondNATNetworkRefusedUsesTheOne(t *testing.T, hns func() *hcnsim.Sim) {
	for _, refused := range []bool{false, true} {
		t.Run(fmt.Sprintf("second-nat-refused=%v", refused), func(t *testing.T) {
			sim := hns()
			r := sim.Rules()
			r.SecondNATRefused = refused
			sim.SetRules(r)
			other, err := sim.CreateNetwork(ctx, hcn.NetworkSpec{Name: "winnat", Type: hcn.NetworkNAT})
			if err != nil {
				t.Fatal(err)
			}
			var said []string
			mgr := newManager(sim, hcn.ManagerConfig{CreateNetwork: true, Network: hcn.NetworkSpec{Name: "nat", Type: hcn.NetworkNAT},
				Announce: func(n hcn.Network, what string) { said = append(said, n.Name+": "+what) }})
			id, err := mgr.EnsureNetwork(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if refused != (id == other.ID) || len(said) != 1 {
				t.Fatalf("network %s (winnat is %s), announced %q", id, other.ID, said)
			}
			if refused && !strings.Contains(said[0], "winnat: HNS takes one NAT network") {
				t.Fatalf("announced %q", said)
			}
		})
	}
}

// Issue 29, 7: a change of the local-routed or the IPv6 flag alone, same
// ports and host IP, is a change of behaviour: the endpoint is rebuilt.
func testFlagChangeAloneRebuilds(t *testing.T, hns func() *hcnsim.Sim) {
	policy := func(flags hcn.NatFlags) []hcn.PortMappingPolicy {
		return []hcn.PortMappingPolicy{{Protocol: hcn.TCP, ExternalPort: 8080, InternalPort: 80, Flags: flags}}
	}
	for _, tc := range []struct {
		name     string
		from, to hcn.NatFlags
	}{
		{"local-routed off", hcn.NatFlagsLocalRoutedVip, 0},
		{"local-routed on", 0, hcn.NatFlagsLocalRoutedVip},
		{"IPv6 on", hcn.NatFlagsLocalRoutedVip, hcn.NatFlagsLocalRoutedVip | hcn.NatFlagsIPv6},
		{"IPv6 off", hcn.NatFlagsLocalRoutedVip | hcn.NatFlagsIPv6, hcn.NatFlagsLocalRoutedVip},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sim, mgr := setup(hns, true)
			ns := sim.CreateNamespace("")
			first, _, err := mgr.Ensure(ctx, hcn.Desired{SandboxID: "sb1", Namespace: ns, Policies: policy(tc.from)})
			if err != nil {
				t.Fatal(err)
			}
			ep, out, err := mgr.Ensure(ctx, hcn.Desired{SandboxID: "sb1", Namespace: ns, Policies: policy(tc.to)})
			if err != nil || out != hcn.Created || ep.ID == first.ID {
				t.Fatalf("Ensure with flags %d after %d = %v, %v; want the endpoint rebuilt", tc.to, tc.from, out, err)
			}
			if got := ours(t, sim, mgr, "sb1"); !hcn.SamePolicies(got.PortMappings, policy(tc.to)) {
				t.Fatalf("HNS holds %+v", got)
			}
		})
	}
}

// Issue 29, 8: a listing that meets an endpoint deleted meanwhile (hcsshim
// fails the whole listing with not-found) is taken again, a bounded number
// of times, and not failed: once is read through; HNS changing at every
// try is ErrChanged, retried by the caller, after three listings.
func testListingThatRacedADeleteIsTakenAgainBounded(t *testing.T, hns func() *hcnsim.Sim) {
	for _, tc := range []struct {
		races int
		ok    bool
	}{{1, true}, {2, true}, {10, false}} {
		t.Run(fmt.Sprint("races=", tc.races), func(t *testing.T) {
			sim, mgr := setup(hns, true)
			if _, _, err := mgr.Ensure(ctx, hcn.Desired{SandboxID: "sb1", Namespace: sim.CreateNamespace(""), Policies: web}); err != nil {
				t.Fatal(err)
			}
			if err := sim.InjectFault(hcnsim.Fault{Op: hcnsim.OpListEndpointsOfNetwork, Kind: "not-found", Count: tc.races}); err != nil {
				t.Fatal(err)
			}
			before := sim.Calls()[hcnsim.OpListEndpointsOfNetwork]
			eps, err := mgr.Owned(ctx)
			listings := sim.Calls()[hcnsim.OpListEndpointsOfNetwork] - before
			if tc.ok {
				if err != nil || len(eps) != 1 || listings != tc.races+1 {
					t.Fatalf("Owned = %+v, %v after %d listings; want our endpoint after %d", eps, err, listings, tc.races+1)
				}
				return
			}
			if !errors.Is(err, hcn.ErrChanged) || hcn.Permanent(err) || !hcn.Retryable(err) || listings != 3 {
				t.Fatalf("Owned = %v after %d listings; want ErrChanged (retried) after 3", err, listings)
			}
		})
	}
}

// Unit: the plugin's own endpoint in a pod's namespace is not one of its
// neighbours (the CNI's endpoints), whatever else is there.
func testOwnEndpointIsNoNeighbour(t *testing.T, hns func() *hcnsim.Sim) {
	sim, mgr := setup(hns, true)
	ns := sim.CreateNamespace("")
	own, _, err := mgr.Ensure(ctx, hcn.Desired{SandboxID: "sb1", Namespace: ns, Policies: web})
	if err != nil {
		t.Fatal(err)
	}
	netID, _ := mgr.EnsureNetwork(ctx)
	cni, err := sim.CreateEndpoint(ctx, hcn.EndpointSpec{Name: "cbr0_sb1", NetworkID: netID, PortMappings: web2})
	if err == nil {
		err = sim.AddNamespaceEndpoint(ctx, ns, cni.ID)
	}
	if err != nil {
		t.Fatal(err)
	}
	got, err := mgr.Neighbours(ctx, ns, "sb1")
	if err != nil || len(got) != 1 || got[0].ID != cni.ID {
		t.Fatalf("Neighbours = %+v, %v; want the CNI's %s alone, not our %s", got, err, cni.ID, own.ID)
	}
}

// Issue 30, 7: an attach HNS completed although its call failed (a timed-out
// attach HNS finished, then the retry's attach answers "already attached")
// is done: the endpoint attached where it belongs is kept, not rolled back.
func testAttachHNSCompletedIsKept(t *testing.T, hns func() *hcnsim.Sim) {
	sim, mgr := setup(hns, true)
	ns := sim.CreateNamespace("")
	if err := sim.InjectFault(hcnsim.Fault{Op: hcnsim.OpAddNamespaceEndpoint, Kind: "already-attached", After: true}); err != nil {
		t.Fatal(err)
	}
	ep, out, err := mgr.Ensure(ctx, hcn.Desired{SandboxID: "sb1", Namespace: ns, Policies: web})
	if err != nil || out != hcn.Created || ep.Namespace != ns {
		t.Fatalf("Ensure = %+v, %v, %v; want the endpoint HNS attached kept", ep, out, err)
	}
	if got := ours(t, sim, mgr, "sb1"); got == nil || got.ID != ep.ID || got.Namespace != ns {
		t.Fatalf("HNS holds %+v, want %s attached to %s", got, ep.ID, ns)
	}
	// attached elsewhere: not ours to keep, rolled back as before
	other := sim.CreateNamespace("")
	if _, err := mgr.Remove(ctx, "sb1"); err != nil {
		t.Fatal(err)
	}
	if err := sim.InjectFault(hcnsim.Fault{Op: hcnsim.OpAddNamespaceEndpoint, Kind: "already-attached"}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := mgr.Ensure(ctx, hcn.Desired{SandboxID: "sb1", Namespace: other, Policies: web}); !errors.Is(err, hcn.ErrAlreadyAttached) {
		t.Fatalf("Ensure into a namespace HNS did not attach it to = %v, want ErrAlreadyAttached", err)
	}
	if got := ours(t, sim, mgr, "sb1"); got != nil {
		t.Fatalf("the unattached endpoint was left: %+v", got)
	}
}

// Issues 30 and 47: the default names a NAT network without a subnet.
// The manager picks it, a /20 clear of the host's addresses and of every
// HNS network, and says so, whether HNS would pick one itself (hcsshim
// v0.15.0's TestCreateDeleteNetworks creates such a network) or refuses
// (unverified: Rules.NATNeedsSubnet). Both ways a pod is mapped.
func TestNATNetworkWithoutASubnet(t *testing.T) {
	for _, needs := range []bool{false, true} {
		t.Run(fmt.Sprint("nat-needs-subnet=", needs), func(t *testing.T) {
			sim := hcnsim.New()
			sim.SetRules(hcnsim.Rules{NATNeedsSubnet: needs})
			if _, err := sim.CreateNetwork(ctx, hcn.NetworkSpec{Name: "docker-nat", Type: hcn.NetworkL2Bridge, Subnet: "172.16.0.0/20"}); err != nil {
				t.Fatal(err)
			}
			var said []string
			cfg := lowPriority(hcn.ManagerConfig{CreateNetwork: true, Network: hcn.NetworkSpec{Name: "nat", Type: hcn.NetworkNAT},
				AllowCNINetwork: true, Announce: func(_ hcn.Network, what string) { said = append(said, what) },
				HostPrefixes: func() ([]netip.Prefix, error) { return []netip.Prefix{netip.MustParsePrefix("172.16.16.0/24")}, nil }})
			mgr := newManager(sim, cfg)
			ep, _, err := mgr.Ensure(ctx, hcn.Desired{SandboxID: "sb1", Namespace: sim.CreateNamespace(""), Policies: web})
			if err != nil || ep.Namespace == "" {
				t.Fatalf("Ensure = %+v, %v", ep, err)
			}
			n, err := sim.GetNetworkByName(ctx, "nat")
			if err != nil || len(n.Subnets) != 1 || n.Gateway != "172.16.32.1" {
				t.Fatalf("network %+v, %v", n, err)
			}
			if picked := n.Subnets[0]; picked != "172.16.32.0/20" || !strings.Contains(strings.Join(said, "; "), "picked clear of the host's addresses") {
				t.Fatalf("the manager made %s and said %q; want 172.16.32.0/20 (clear of 172.16.0.0/20 and the host's 172.16.16.0/24), said", picked, said)
			}
		})
	}
}

// cleanup and status list what is ours on every network (a network the
// configuration no longer names included) and never another's endpoint: an
// uninstall that took the CNI's endpoints would cut every pod's network.
func testOwnedEverywhereIsOursOnEveryNetworkAndNothingElse(t *testing.T, hns func() *hcnsim.Sim) {
	sim, mgr := setup(hns, true)
	ns := sim.CreateNamespace("")
	if _, _, err := mgr.Ensure(ctx, hcn.Desired{SandboxID: "sb1", Namespace: ns, Policies: web}); err != nil {
		t.Fatal(err)
	}
	natID, _ := mgr.EnsureNetwork(ctx)
	old, err := sim.CreateNetwork(ctx, hcn.NetworkSpec{Name: "old", Type: hcn.NetworkNAT, Subnet: "172.31.0.0/24", Gateway: "172.31.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	cbr, err := sim.CreateNetwork(ctx, hcn.NetworkSpec{Name: "cbr0", Type: hcn.NetworkL2Bridge, Subnet: "10.244.0.0/24"})
	if err != nil {
		t.Fatal(err)
	}
	for _, spec := range []hcn.EndpointSpec{
		{Name: mgr.EndpointName("sb2"), NetworkID: old.ID},        // ours, left on a network no longer configured
		{Name: "cbr0_sb1", NetworkID: cbr.ID, PortMappings: web2}, // the CNI's
		{Name: "someone-elses", NetworkID: natID},                 // another's on our network
		{Name: strings.ToUpper(mgr.EndpointName("sb3")), NetworkID: natID},
	} {
		if _, err := sim.CreateEndpoint(ctx, spec); err != nil {
			t.Fatal(err)
		}
	}
	eps, err := mgr.OwnedEverywhere(ctx)
	var names []string
	for _, ep := range eps {
		names = append(names, ep.Name)
	}
	slices.Sort(names)
	if want := []string{mgr.EndpointName("sb1"), mgr.EndpointName("sb2")}; err != nil || !slices.Equal(names, want) {
		t.Fatalf("OwnedEverywhere = %v, %v; want %v: ours on every network, nothing else", names, err, want)
	}
}

// A restarted plugin's first listing teaches the manager what this HNS
// does with routes: an endpoint of ours that reads back with routes shows
// that HNS keeps them, so one without routes (an older build's) is
// rebuilt with them instead of adopted as HNS's doing.
func testARestartLearnsFromAListingThatHNSKeepsRoutes(t *testing.T, hns func() *hcnsim.Sim) {
	sim, mgr := setup(hns, true)
	ns1, ns2 := sim.CreateNamespace(""), sim.CreateNamespace("")
	if _, _, err := mgr.Ensure(ctx, hcn.Desired{SandboxID: "sb1", Namespace: ns1, Policies: web}); err != nil {
		t.Fatal(err)
	}
	netID, _ := mgr.EnsureNetwork(ctx)
	bare, err := sim.CreateEndpoint(ctx, hcn.EndpointSpec{Name: mgr.EndpointName("sb2"), NetworkID: netID, PortMappings: web2})
	if err == nil {
		err = sim.AddNamespaceEndpoint(ctx, ns2, bare.ID)
	}
	if err != nil {
		t.Fatal(err)
	}
	restarted := newManager(sim, lowPriority(hcn.ManagerConfig{CreateNetwork: true,
		Network: hcn.NetworkSpec{Name: "nat", Type: hcn.NetworkNAT, Subnet: "172.30.0.0/24", Gateway: "172.30.0.1"}}))
	if _, err := restarted.Owned(ctx); err != nil { // the start-up listing
		t.Fatal(err)
	}
	_, out, err := restarted.Ensure(ctx, hcn.Desired{SandboxID: "sb2", Namespace: ns2, Policies: web2})
	if want := map[bool]hcn.Outcome{false: hcn.Created, true: hcn.Unchanged}[sim.Rules().DropRoutes]; err != nil || out != want {
		t.Fatalf("the routeless endpoint after a listing showed routes kept: %v, %v; want %v", out, err, want)
	}
}

// Issues 38, 47 and 53: the NAT network's subnet is checked, when the
// network is first found, against the other HNS networks' subnets, the
// cluster's ranges and the host's addresses (but the host's vNIC on the
// subnet itself): a network there already that overlaps one is refused
// (ErrInvalid, naming both ranges and hcn.allow_subnet_overlap), as a
// configured subnet is before HNS creates it (nothing is made); with
// AllowOverlap it is taken and told once, since every mapped pod gets an
// on-link route for the subnet. A network the plugin creates gets a
// subnet the manager picks clear of them, even where the cluster's ranges
// cover where HNS would place it (the simulator's pick, 172.31.240.0/20,
// as HNS's own are in 172.16.0.0/12).
func TestTheNATSubnetIsCheckedAgainstTheClustersRanges(t *testing.T) {
	for _, tc := range []struct {
		name     string
		cni      string   // a CNI network's subnet ("" none)
		existing bool     // a NAT network "nat" made before, where HNS placed it
		subnet   string   // hcn.subnet ("" the manager picks)
		cluster  []string // hcn.cluster_ranges
		host     string   // a host address prefix besides its vNIC on the subnet ("" none)
		allow    bool     // hcn.allow_subnet_overlap
		want     []string // the overlaps refused (or, allowed, told)
		picked   string   // the subnet the network gets ("" none is made)
	}{
		{"created clear", "10.244.0.0/16", false, "", []string{"10.96.0.0/12"}, "", false, nil, "172.16.0.0/20"},
		{"created clear of ranges covering HNS's default", "", false, "", []string{"172.16.0.0/16", "172.31.0.0/16", "10.96.0.0/12"}, "", false, nil, "172.17.0.0/20"},
		{"created clear of a CNI network", "172.16.1.0/24", false, "", nil, "", false, nil, "172.16.16.0/20"},
		{"created clear of the host", "", false, "", nil, "172.16.0.0/19", false, nil, "172.16.32.0/20"},
		{"there already, in a cluster range", "", true, "", []string{"10.96.0.0/12", "172.31.0.0/16"}, "", false,
			[]string{"172.31.240.0/20 overlaps the cluster's range 172.31.0.0/16 (hcn.cluster_ranges)"}, "172.31.240.0/20"},
		{"there already, over a CNI network", "172.31.241.0/24", true, "", nil, "", false,
			[]string{"172.31.240.0/20 overlaps 172.31.241.0/24 of HNS network cbr0"}, "172.31.240.0/20"},
		{"there already, over the host's address", "", true, "", nil, "172.31.0.0/16", false,
			[]string{"172.31.240.0/20 overlaps the host's address 172.31.0.0/16"}, "172.31.240.0/20"},
		{"there already, clear: the host's vNIC on it is no overlap", "", true, "", []string{"10.96.0.0/12"}, "", false, nil, "172.31.240.0/20"},
		{"there already, overlapping, allowed", "", true, "", []string{"172.31.0.0/16"}, "", true,
			[]string{"172.31.240.0/20 overlaps the cluster's range 172.31.0.0/16 (hcn.cluster_ranges)"}, "172.31.240.0/20"},
		{"a configured subnet over a CNI network is not created", "10.9.4.0/24", false, "10.9.0.0/16", nil, "", false,
			[]string{"10.9.0.0/16 overlaps 10.9.4.0/24 of HNS network cbr0"}, ""},
		{"a configured subnet over the host is not created", "", false, "10.9.0.0/16", nil, "10.9.128.0/17", false,
			[]string{"10.9.0.0/16 overlaps the host's address 10.9.128.0/17"}, ""},
		{"a configured subnet clear is created", "10.244.0.0/16", false, "10.9.0.0/16", []string{"10.96.0.0/12"}, "192.0.2.0/24", false, nil, "10.9.0.0/16"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sim := hcnsim.New()
			if tc.cni != "" {
				if _, err := sim.CreateNetwork(ctx, hcn.NetworkSpec{Name: "cbr0", Type: hcn.NetworkL2Bridge, Subnet: tc.cni}); err != nil {
					t.Fatal(err)
				}
			}
			if tc.existing { // HNS places it: the simulator's pick
				if _, err := sim.CreateNetwork(ctx, hcn.NetworkSpec{Name: "nat", Type: hcn.NetworkNAT}); err != nil {
					t.Fatal(err)
				}
			}
			var told [][]string
			spec := hcn.NetworkSpec{Name: "nat", Type: hcn.NetworkNAT, Subnet: tc.subnet}
			if tc.subnet != "" {
				spec.Gateway = netip.MustParsePrefix(tc.subnet).Addr().Next().String()
			}
			cfg := lowPriority(hcn.ManagerConfig{CreateNetwork: true, Network: spec, AllowOverlap: tc.allow,
				ClusterRanges: hcn.Prefixes(tc.cluster), Shadowed: func(_ hcn.Network, over []string) { told = append(told, over) },
				HostPrefixes: func() ([]netip.Prefix, error) {
					// the host's vNIC on the network HNS placed, and what the row adds
					hosts := []netip.Prefix{netip.MustParsePrefix("172.31.240.1/20").Masked()}
					if tc.host != "" {
						hosts = append(hosts, netip.MustParsePrefix(tc.host))
					}
					return hosts, nil
				}})
			mgr := newManager(sim, cfg)
			for range 2 { // refused at every start; allowed, told once, when the network is first found
				_, _, err := mgr.Ensure(ctx, hcn.Desired{SandboxID: "sb1", Namespace: sim.CreateNamespace(""), Policies: web})
				switch {
				case tc.want != nil && !tc.allow:
					if !errors.Is(err, hcn.ErrInvalid) || !strings.Contains(err.Error(), strings.Join(tc.want, "; ")) || !strings.Contains(err.Error(), "hcn.allow_subnet_overlap = true") {
						t.Fatalf("%v; want refused naming %q and hcn.allow_subnet_overlap", err, tc.want)
					}
				case err != nil:
					t.Fatal(err)
				}
			}
			n, err := sim.GetNetworkByName(ctx, "nat")
			switch {
			case tc.picked == "":
				if err == nil {
					t.Fatalf("network %+v made for a refused subnet", n)
				}
			case err != nil || len(n.Subnets) != 1 || n.Subnets[0] != tc.picked:
				t.Fatalf("network %+v, %v; want subnet %s", n, err, tc.picked)
			}
			if eps := sim.State().Endpoints; tc.want != nil && !tc.allow && len(eps) != 0 {
				t.Fatalf("endpoints %+v on a refused network", eps)
			}
			switch {
			case tc.want != nil && tc.allow:
				if len(told) != 1 || strings.Join(told[0], "; ") != strings.Join(tc.want, "; ") {
					t.Fatalf("told %q, want once %q", told, tc.want)
				}
			case told != nil:
				t.Fatalf("told %q, want nothing", told)
			}
		})
	}
	// ranges that leave no /20 of 172.16.0.0/12: refused, saying what to set
	sim := hcnsim.New()
	mgr := newManager(sim, lowPriority(hcn.ManagerConfig{CreateNetwork: true, Network: hcn.NetworkSpec{Name: "nat", Type: hcn.NetworkNAT},
		ClusterRanges: hcn.Prefixes([]string{"172.16.0.0/12"}), HostPrefixes: func() ([]netip.Prefix, error) { return nil, nil }}))
	if _, err := mgr.EnsureNetwork(ctx); !errors.Is(err, hcn.ErrInvalid) || !strings.Contains(err.Error(), "set hcn.subnet") {
		t.Fatalf("no room left: %v", err)
	}
}

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
			mgr := newManager(sim, hcn.ManagerConfig{CreateNetwork: true, DefaultRoute: tc.mode, RouteMetric: tc.metric,
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
	old := newManager(sim, hcn.ManagerConfig{CreateNetwork: true, DefaultRoute: hcn.RouteHNS, Network: spec})
	if _, _, err := old.Ensure(ctx, hcn.Desired{SandboxID: "sb1", Namespace: ns, Policies: web}); err != nil {
		t.Fatal(err)
	}
	mgr := newManager(sim, hcn.ManagerConfig{Network: spec, DefaultRoute: hcn.RouteLowPriority, RouteMetric: 5000})
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
	mgr := newManager(sim, hcn.ManagerConfig{Network: hcn.NetworkSpec{Name: "l2"}, AllowCNINetwork: true, DefaultRoute: hcn.RouteLowPriority, RouteMetric: 5000})
	_, _, err := mgr.Ensure(ctx, hcn.Desired{SandboxID: "sb1", Namespace: ns, Policies: web})
	if !errors.Is(err, hcn.ErrInvalid) || !strings.Contains(err.Error(), "hcn.gateway") || !strings.Contains(err.Error(), "l2") {
		t.Fatalf("err = %v, want an invalid-request error naming the network and hcn.gateway", err)
	}
	if st := sim.State(); len(st.Endpoints) != 0 {
		t.Errorf("endpoints created: %+v", st.Endpoints)
	}
	// the configured gateway is used when HNS reports none
	withGW := newManager(sim, hcn.ManagerConfig{Network: hcn.NetworkSpec{Name: "l2", Gateway: "10.1.0.254"}, AllowCNINetwork: true,
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
				mgr := newManager(sim, hcn.ManagerConfig{CreateNetwork: true, DefaultRoute: hcn.RouteLowPriority, RouteMetric: 5000,
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

// Issue 26: Neighbours asks the pod's namespace, not the node: the same
// HNS calls with 1 or 200 other pods' endpoints on the node, and never a
// listing of every endpoint.
func TestNeighboursCostTheSameOnAFullNode(t *testing.T) {
	calls := func(others int) map[string]int {
		sim := hcnsim.New()
		cni, err := sim.CreateNetwork(ctx, hcn.NetworkSpec{Name: "cbr0", Type: hcn.NetworkL2Bridge, Subnet: "10.244.0.0/16"})
		if err != nil {
			t.Fatal(err)
		}
		for i := range others { // other pods, each with its CNI endpoint in its own namespace
			ep, err := sim.CreateEndpoint(ctx, hcn.EndpointSpec{Name: fmt.Sprint("cni-", i), NetworkID: cni.ID})
			if err == nil {
				err = sim.AddNamespaceEndpoint(ctx, sim.CreateNamespace(""), ep.ID)
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		ns := sim.CreateNamespace("")
		ep, err := sim.CreateEndpoint(ctx, hcn.EndpointSpec{Name: "cni-p", NetworkID: cni.ID,
			PortMappings: []hcn.PortMappingPolicy{{Protocol: hcn.TCP, ExternalPort: 9000, InternalPort: 80}}})
		if err == nil {
			err = sim.AddNamespaceEndpoint(ctx, ns, ep.ID)
		}
		if err != nil {
			t.Fatal(err)
		}
		mgr := newManager(sim, lowPriority(hcn.ManagerConfig{Network: hcn.NetworkSpec{Name: "nat", Type: hcn.NetworkNAT}}))
		before := sim.Calls()
		got, err := mgr.Neighbours(ctx, ns, "p")
		if err != nil || len(got) != 1 || got[0].ID != ep.ID {
			t.Fatalf("Neighbours = %+v, %v; want the CNI's endpoint", got, err)
		}
		out := map[string]int{}
		for op, n := range sim.Calls() {
			if d := n - before[op]; d > 0 {
				out[op] = d
			}
		}
		return out
	}
	one, many := calls(1), calls(200)
	if !maps.Equal(one, many) || many[hcnsim.OpListEndpoints] != 0 {
		t.Fatalf("HNS calls for the pod's neighbours: %v with 1 other pod, %v with 200", one, many)
	}
}

// newManager is hcn.NewManager with the configuration's endpoint prefix
// and listing bound where cfg sets none (the plugin's, config's).
func newManager(svc hcn.Service, cfg hcn.ManagerConfig) *hcn.Manager {
	cfg.Prefix = cmp.Or(cfg.Prefix, config.EndpointPrefix)
	cfg.ListingAttempts = cmp.Or(cfg.ListingAttempts, config.HNSListingAttempts)
	return hcn.NewManager(svc, cfg)
}
