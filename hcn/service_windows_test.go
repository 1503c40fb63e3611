//go:build windows

// These tests run the hcsshim adapter for real: on Linux under wine against
// the HNS emulator (make test-windows), on a Windows host against HNS.
package hcn

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	hcsshim "github.com/Microsoft/hcsshim/hcn"
	"golang.org/x/sys/windows"
)

var bg = context.Background()

func newWin(t *testing.T) Service {
	t.Helper()
	svc, err := NewWindowsService(context.Background(), NewLimiter(4))
	if err != nil {
		t.Fatalf("NewWindowsService: %v", err)
	}
	return svc
}

// subnets numbers the test networks of this process: on a real host each
// NAT network needs a prefix of its own.
var subnets atomic.Int32

// testNetwork creates a NAT network of a name unique to the test, on a /24
// of 172.31.0.0/16 clear of every HNS network's subnet and every address
// of the host (on a real host Docker's nat network, and the runner's own
// interfaces, may be anywhere there), and deletes it afterwards (on a real
// host NAT networks outlive the test).
func testNetwork(t *testing.T, svc Service) *Network {
	t.Helper()
	name := fmt.Sprintf("hcnpm-test-%d", time.Now().UnixNano())
	subnet := clearSubnet(t, svc)
	n, err := svc.CreateNetwork(bg, NetworkSpec{Name: name, Type: NetworkNAT,
		Subnet: subnet.String(), Gateway: subnet.Addr().Next().String()})
	if err != nil {
		t.Fatalf("CreateNetwork: %v", err)
	}
	t.Cleanup(func() {
		if hn, err := hcsshim.GetNetworkByID(n.ID); err == nil {
			_ = hn.Delete()
		}
	})
	return n
}

// clearSubnet is a /24 of 172.31.0.0/16 that overlaps no HNS network and
// no address of the host.
func clearSubnet(t *testing.T, svc Service) netip.Prefix {
	t.Helper()
	nets, err := svc.ListNetworks(bg)
	if err != nil {
		t.Fatalf("ListNetworks: %v", err)
	}
	taken, err := InterfacePrefixes()
	if err != nil {
		t.Fatalf("the host's addresses: %v", err)
	}
	for _, n := range nets {
		for _, s := range n.Subnets {
			if p, err := netip.ParsePrefix(s); err == nil {
				taken = append(taken, p)
			}
		}
	}
	start := (os.Getpid()*7 + int(subnets.Add(1))) % 250
	for i := range 250 {
		p := netip.MustParsePrefix(fmt.Sprintf("172.31.%d.0/24", (start+i)%250+1))
		if !slices.ContainsFunc(taken, p.Overlaps) {
			return p
		}
	}
	t.Fatalf("no /24 of 172.31.0.0/16 is clear of %v", taken)
	return netip.Prefix{}
}

// testNamespace creates a namespace through hcsshim itself as containerd
// creates a pod's (pkg/netns/netns_windows.go: no type, so never the host's
// own HostDefault compartment), whose ID is read at the boundary like any
// GUID from HNS.
func testNamespace(t *testing.T) GUID {
	t.Helper()
	ns, err := (&hcsshim.HostComputeNamespace{}).Create()
	if err != nil {
		t.Fatalf("creating a namespace: %v", err)
	}
	t.Cleanup(func() { _ = ns.Delete() })
	return ParseGUID(ns.Id)
}

func TestWindowsNetworkEnsure(t *testing.T) {
	svc := newWin(t)
	if _, err := svc.GetNetworkByName(bg, "no-such-network-hcnpm"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("missing network: %v, want ErrNotFound", err)
	}
	n := testNetwork(t, svc)
	got, err := svc.GetNetworkByName(bg, n.Name)
	if err != nil || got.ID != n.ID || got.Type != NetworkNAT {
		t.Fatalf("GetNetworkByName = %+v, %v; want %+v", got, err, n)
	}
	// the shared emulator (or node) keeps other networks, maybe on this
	// subnet: the overlap rule is tested on the simulator
	mgr := NewManager(svc, ManagerConfig{Prefix: "nri-hcn-portmap-", Network: NetworkSpec{Name: n.Name}, DefaultRoute: RouteLowPriority, RouteMetric: 5000,
		AllowOverlap: true})
	if id, err := mgr.EnsureNetwork(bg); err != nil || id != n.ID {
		t.Fatalf("EnsureNetwork = %q, %v", id, err)
	}
}

func TestWindowsEndpointPolicies(t *testing.T) {
	svc := newWin(t)
	n := testNetwork(t, svc)
	// IPv4 only: NAT networks do not support IPv6 (the IPv6 policy JSON is
	// checked against the emulator, emu_windows_test.go)
	policies := []PortMappingPolicy{ // what request.BuildPolicies makes of 18080:80, 10.0.0.5:15353:53/udp, 10.0.0.4:18443:443
		{Protocol: TCP, ExternalPort: 18080, InternalPort: 80, Flags: NatFlagsLocalRoutedVip},
		{Protocol: TCP, ExternalPort: 18443, InternalPort: 443, VIP: "10.0.0.4", Flags: NatFlagsLocalRoutedVip},
		{Protocol: UDP, ExternalPort: 15353, InternalPort: 53, VIP: "10.0.0.5", Flags: NatFlagsLocalRoutedVip},
	}
	ep, err := svc.CreateEndpoint(bg, EndpointSpec{Name: "hcnpm-policies", NetworkID: n.ID, PortMappings: policies, OutboundNAT: true})
	if err != nil {
		t.Fatalf("CreateEndpoint: %v", err)
	}
	t.Cleanup(func() { _ = svc.DeleteEndpoint(bg, ep.ID) })
	// read it back through hcsshim itself: what HNS holds
	raw, err := hcsshim.GetEndpointByID(ep.ID)
	if err != nil {
		t.Fatal(err)
	}
	var got []PortMappingPolicy
	outbound := false
	for _, p := range raw.Policies {
		switch p.Type {
		case hcsshim.PortMapping:
			var s hcsshim.PortMappingPolicySetting
			if err := json.Unmarshal(p.Settings, &s); err != nil {
				t.Fatal(err)
			}
			got = append(got, PortMappingPolicy{Protocol: Protocol(s.Protocol), InternalPort: s.InternalPort,
				ExternalPort: s.ExternalPort, VIP: s.VIP, Flags: NatFlags(s.Flags)})
		case hcsshim.OutBoundNAT:
			outbound = true
		}
	}
	want := []PortMappingPolicy{
		{Protocol: 6, InternalPort: 80, ExternalPort: 18080, Flags: 1},
		{Protocol: 6, InternalPort: 443, ExternalPort: 18443, VIP: "10.0.0.4", Flags: 1},
		{Protocol: 17, InternalPort: 53, ExternalPort: 15353, VIP: "10.0.0.5", Flags: 1},
	}
	if !SamePolicies(got, want) || !outbound {
		t.Fatalf("HNS holds %+v (OutBoundNAT %v), want %+v and OutBoundNAT", got, outbound, want)
	}
	if raw.HostComputeNetwork != n.ID || raw.Name != "hcnpm-policies" {
		t.Errorf("endpoint %+v not on network %s", raw, n.ID)
	}
	// and the adapter reads the same back
	eps, err := svc.ListEndpointsByName(bg, "hcnpm-policies")
	if err != nil || len(eps) != 1 || !SamePolicies(eps[0].PortMappings, want) || !eps[0].OutboundNAT {
		t.Fatalf("ListEndpointsByName = %+v, %v", eps, err)
	}
}

func TestWindowsAttachDetachDelete(t *testing.T) {
	svc := newWin(t)
	n := testNetwork(t, svc)
	ns := testNamespace(t)
	ep, err := svc.CreateEndpoint(bg, EndpointSpec{Name: "hcnpm-attach", NetworkID: n.ID,
		PortMappings: []PortMappingPolicy{{Protocol: TCP, ExternalPort: 18081, InternalPort: 80, Flags: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.AddNamespaceEndpoint(bg, ns, ep.ID); err != nil {
		t.Fatalf("AddNamespaceEndpoint: %v", err)
	}
	got, err := svc.GetNamespace(bg, ns)
	if err != nil || len(got.Endpoints) != 1 || !equalFoldID(got.Endpoints[0], ep.ID) {
		t.Fatalf("namespace = %+v, %v; want endpoint %s", got, err, ep.ID)
	}
	if err := svc.AddNamespaceEndpoint(bg, ns, ep.ID); !errors.Is(err, ErrAlreadyAttached) {
		t.Errorf("second attach: %v, want ErrAlreadyAttached", err)
	}
	// delete while attached is unverified: TestWhatThisHNSDoes reports it
	if err := svc.RemoveNamespaceEndpoint(bg, ns, ep.ID); err != nil {
		t.Fatalf("RemoveNamespaceEndpoint: %v", err)
	}
	if err := svc.DeleteEndpoint(bg, ep.ID); err != nil {
		t.Fatalf("DeleteEndpoint: %v", err)
	}
	if err := svc.DeleteEndpoint(bg, ep.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("second delete: %v, want ErrNotFound (ERROR_NOT_FOUND from HNS)", err)
	}
	if _, err := svc.GetNamespace(bg, "6B1F3E2A-0000-4000-8000-000000000000"); !errors.Is(err, ErrNotFound) {
		t.Errorf("missing namespace: %v, want ErrNotFound", err)
	}
}

func TestWindowsPortConflictAndRollback(t *testing.T) {
	svc := newWin(t)
	n := testNetwork(t, svc)
	ns := testNamespace(t)
	// the shared emulator (or node) keeps other networks, maybe on this
	// subnet: the overlap rule is tested on the simulator
	mgr := NewManager(svc, ManagerConfig{Prefix: "nri-hcn-portmap-", Network: NetworkSpec{Name: n.Name}, DefaultRoute: RouteLowPriority, RouteMetric: 5000,
		AllowOverlap: true})
	web := []PortMappingPolicy{{Protocol: TCP, ExternalPort: 18082, InternalPort: 80, Flags: 1}}
	ep, _, err := mgr.Ensure(bg, Desired{SandboxID: "win-a", Namespace: ns, Policies: web})
	if err != nil {
		t.Fatalf("Ensure: %v", err)
	}
	t.Cleanup(func() { _, _ = mgr.Remove(bg, "win-a") })
	if _, err := svc.CreateEndpoint(bg, EndpointSpec{Name: "hcnpm-taker", NetworkID: n.ID, PortMappings: web}); !errors.Is(err, ErrPortInUse) {
		t.Errorf("second endpoint on a held port: %v, want ErrPortInUse", err)
	}
	// attach to a namespace that does not exist: the manager rolls back
	_, _, err = mgr.Ensure(bg, Desired{SandboxID: "win-b", Namespace: "6B1F3E2A-0000-4000-8000-000000000001",
		Policies: []PortMappingPolicy{{Protocol: TCP, ExternalPort: 18083, InternalPort: 80}}})
	var se *StepError
	if !errors.As(err, &se) || se.Step != StepAttachEndpoint || !errors.Is(err, ErrNotFound) {
		t.Fatalf("attach to a missing namespace: %v", err)
	}
	if eps, err := svc.ListEndpointsByName(bg, mgr.EndpointName("win-b")); err != nil || len(eps) != 0 {
		t.Fatalf("rollback left %+v (%v)", eps, err)
	}
	if n, err := mgr.Remove(bg, "win-a"); err != nil || n != 1 {
		t.Fatalf("Remove = %d, %v", n, err)
	}
	if eps, err := svc.ListEndpointsByName(bg, ep.Name); err != nil || len(eps) != 0 {
		t.Fatalf("after Remove: %+v, %v", eps, err)
	}
}

func TestWindowsCallGivesUpAtTheDeadline(t *testing.T) {
	svc := newWin(t)
	ctx, cancel := context.WithCancel(bg)
	cancel()
	if _, err := svc.ListEndpoints(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("ListEndpoints with a done context: %v", err)
	}
}

func equalFoldID(a, b string) bool {
	g1, err1 := guidOf(a)
	g2, err2 := guidOf(b)
	return err1 == nil && err2 == nil && g1 == g2
}

// Issue 10, item 8: the endpoints of a pod's namespace, read through
// hcsshim, carry the namespace and the port mappings the CNI gave them.
func TestWindowsNeighboursCarryTheirMappings(t *testing.T) {
	svc := newWin(t)
	n := testNetwork(t, svc)
	ns := testNamespace(t)
	mgr := NewManager(svc, ManagerConfig{Prefix: "hcnpm-nb-", DefaultRoute: RouteLowPriority, RouteMetric: 5000})
	cniPolicy := PortMappingPolicy{Protocol: TCP, ExternalPort: 18091, InternalPort: 80}
	cni, err := svc.CreateEndpoint(bg, EndpointSpec{Name: "cbr0-nb", NetworkID: n.ID, PortMappings: []PortMappingPolicy{cniPolicy}})
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.AddNamespaceEndpoint(bg, ns, cni.ID); err != nil {
		t.Fatal(err)
	}
	loose, err := svc.CreateEndpoint(bg, EndpointSpec{Name: "loose-nb", NetworkID: n.ID,
		PortMappings: []PortMappingPolicy{{Protocol: TCP, ExternalPort: 18092, InternalPort: 80}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = svc.RemoveNamespaceEndpoint(bg, ns, cni.ID)
		_ = svc.DeleteEndpoint(bg, cni.ID)
		_ = svc.DeleteEndpoint(bg, loose.ID)
	})
	got, err := mgr.Neighbours(bg, ns, "sandbox")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || !equalFoldID(got[0].ID, cni.ID) {
		t.Fatalf("Neighbours = %+v, want only %s", got, cni.ID)
	}
	if ep := ProvidedBy(PortMappingPolicy{Protocol: TCP, ExternalPort: 18091, InternalPort: 80, Flags: NatFlagsLocalRoutedVip}, got); ep == nil {
		t.Errorf("the CNI's mapping is not seen in %+v", got)
	}
	if ep := ProvidedBy(PortMappingPolicy{Protocol: TCP, ExternalPort: 18092, InternalPort: 80}, got); ep != nil {
		t.Errorf("an unattached endpoint's mapping counted as the namespace's: %+v", ep)
	}
}

// Issue 30, 7: a host without the Containers feature has no vmcompute.dll
// or computenetwork.dll: hcsshim returns the loader's DLLError, which is
// final (ErrNotInstalled, naming the DLL and the fix), not HNS being late.
func TestMissingHNSDLLIsFinal(t *testing.T) {
	dll := &windows.DLLError{Err: windows.ERROR_MOD_NOT_FOUND, ObjName: "vmcompute.dll", Msg: "Failed to load vmcompute.dll: The specified module could not be found."}
	for _, err := range []error{dll, fmt.Errorf("failed during hnsCallRawResponse: %w", dll)} {
		got := mapErr(err, AnyCall)
		if !errors.Is(got, ErrNotInstalled) || !Permanent(got) || Retryable(got) || !strings.Contains(got.Error(), "vmcompute.dll") ||
			!strings.Contains(got.Error(), "Containers") {
			t.Errorf("mapErr(%v) = %v, want the final ErrNotInstalled naming the DLL and the feature", err, got)
		}
	}
}

// The network's gateway is its default route's next hop, whichever route
// HNS lists first (issue 47): a subnet's other routes (a route to the
// cluster, a host route) come before it in some read-backs.
func TestTheGatewayIsTheDefaultRoutesNextHop(t *testing.T) {
	n := toNetwork(&hcsshim.HostComputeNetwork{Id: "N", Name: "nat", Type: hcsshim.NAT, Ipams: []hcsshim.Ipam{{Subnets: []hcsshim.Subnet{
		{IpAddressPrefix: "172.30.0.0/20", Routes: []hcsshim.Route{
			{NextHop: "172.30.0.254", DestinationPrefix: "10.0.0.0/8"},
			{NextHop: "172.30.0.1", DestinationPrefix: "0.0.0.0/0"},
			{NextHop: "172.30.0.9", DestinationPrefix: "0.0.0.0/0"},
		}}}}}})
	if n.Gateway != "172.30.0.1" || !slices.Equal(n.Subnets, []string{"172.30.0.0/20"}) {
		t.Fatalf("toNetwork = %+v, want gateway 172.30.0.1 (the first default route's next hop)", n)
	}
	if n := toNetwork(&hcsshim.HostComputeNetwork{Ipams: []hcsshim.Ipam{{Subnets: []hcsshim.Subnet{{IpAddressPrefix: "10.1.0.0/24",
		Routes: []hcsshim.Route{{NextHop: "10.1.0.9", DestinationPrefix: "10.2.0.0/16"}}}}}}}); n.Gateway != "" {
		t.Fatalf("no default route: gateway %q, want none", n.Gateway)
	}
}
