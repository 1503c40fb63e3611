//go:build windows && hnsemu

// Tests that need the HNS emulator's control calls (faults, latency, the raw
// JSON HNS received): make test-windows runs them under wine.
package hcn_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	hcsshim "github.com/Microsoft/hcsshim/hcn"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn/hcnsim"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/test/hnsemu"
)

// emuNetworksOverlap: the emulator is shared by every test of a run and
// keeps the networks they make, each on the same subnet, so each test's
// manager takes an overlapping network (the overlap rule is
// TestTheNATSubnetIsCheckedAgainstTheClustersRanges', on the simulator).
const emuNetworksOverlap = true

var emuBG = context.Background()

func emu(t *testing.T, fn string, args ...string) string {
	t.Helper()
	addr := os.Getenv("HNS_EMULATOR")
	if addr == "" {
		t.Fatal("HNS_EMULATOR is not set: run these tests with make test-windows")
	}
	hr, out, result, err := hnsemu.Call(addr, fn, args...)
	if err != nil || hr != 0 {
		t.Fatalf("emulator %s: hr %#x %s %v", fn, hr, result, err)
	}
	return out
}

func emuSetup(t *testing.T) (hcn.Service, *hcn.Network) {
	t.Helper()
	svc, err := hcn.NewWindowsService(context.Background(), hcn.NewLimiter(4))
	if err != nil {
		t.Fatal(err)
	}
	n, err := svc.CreateNetwork(emuBG, hcn.NetworkSpec{Name: fmt.Sprintf("emu-%d", time.Now().UnixNano()), Type: hcn.NetworkNAT,
		Subnet: "172.29.0.0/24", Gateway: "172.29.0.1", Adapter: "Ethernet 2"})
	if err != nil {
		t.Fatal(err)
	}
	return svc, n
}

func TestExactJSONHNSReceived(t *testing.T) {
	svc, n := emuSetup(t)
	var network map[string]any
	if err := json.Unmarshal([]byte(emu(t, "Emu.LastSettings", "HcnCreateNetwork")), &network); err != nil {
		t.Fatal(err)
	}
	ipam, _ := json.Marshal(network["Ipams"])
	pol, _ := json.Marshal(network["Policies"])
	if network["Type"] != "NAT" || !strings.Contains(string(ipam), `"IpAddressPrefix":"172.29.0.0/24"`) ||
		!strings.Contains(string(ipam), `"NextHop":"172.29.0.1"`) || !strings.Contains(string(pol), `"NetworkAdapterName":"Ethernet 2"`) {
		t.Errorf("network settings HNS received: %v", network)
	}
	policies := []hcn.PortMappingPolicy{{Protocol: hcn.UDP, ExternalPort: 25353, InternalPort: 53, VIP: "fd00::4", Flags: 3}}
	if _, err := svc.CreateEndpoint(emuBG, hcn.EndpointSpec{Name: "emu-json", NetworkID: n.ID, PortMappings: policies, OutboundNAT: true}); err != nil {
		t.Fatal(err)
	}
	var ep struct {
		Name, HostComputeNetwork, HostComputeNamespace string
		Policies                                       []struct {
			Type     string
			Settings json.RawMessage
		}
		SchemaVersion struct{ Major, Minor int }
	}
	raw := emu(t, "Emu.LastSettings", "HcnCreateEndpoint")
	if err := json.Unmarshal([]byte(raw), &ep); err != nil {
		t.Fatal(err)
	}
	if ep.Name != "emu-json" || !strings.EqualFold(ep.HostComputeNetwork, n.ID) || ep.HostComputeNamespace != "" || ep.SchemaVersion.Major != 2 {
		t.Errorf("endpoint settings HNS received: %s", raw)
	}
	if len(ep.Policies) != 2 || ep.Policies[0].Type != "PortMapping" || ep.Policies[1].Type != "OutBoundNAT" {
		t.Fatalf("policies HNS received: %s", raw)
	}
	if got := string(ep.Policies[0].Settings); got != `{"Protocol":17,"InternalPort":53,"ExternalPort":25353,"VIP":"fd00::4","Flags":3}` {
		t.Errorf("PortMapping settings HNS received: %s", got)
	}
}

// TestTypedErrorMapping: each HNS failure (as HRESULT and error record)
// comes out of the adapter as the project's typed error.
func TestTypedErrorMapping(t *testing.T) {
	svc, n := emuSetup(t)
	tests := []struct {
		kind string
		want error
	}{
		{"not-found", hcn.ErrNotFound},
		{"port-in-use", hcn.ErrPortInUse},
		{"already-attached", hcn.ErrAlreadyAttached},
		{"in-use", hcn.ErrInUse},
		{"invalid", hcn.ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.kind, func(t *testing.T) {
			f, _ := json.Marshal(hcnsim.Fault{Op: hcnsim.OpCreateEndpoint, Kind: tt.kind})
			emu(t, "Emu.InjectFault", string(f))
			_, err := svc.CreateEndpoint(emuBG, hcn.EndpointSpec{Name: "emu-fault", NetworkID: n.ID})
			if !errors.Is(err, tt.want) {
				t.Fatalf("HNS %s: adapter error %v, want %v", tt.kind, err, tt.want)
			}
		})
	}
	t.Run("unclassified", func(t *testing.T) {
		f, _ := json.Marshal(hcnsim.Fault{Op: hcnsim.OpCreateEndpoint, Kind: "internal"})
		emu(t, "Emu.InjectFault", string(f))
		_, err := svc.CreateEndpoint(emuBG, hcn.EndpointSpec{Name: "emu-fault", NetworkID: n.ID})
		if err == nil {
			t.Fatal("want an error")
		}
		for _, typed := range []error{hcn.ErrNotFound, hcn.ErrPortInUse, hcn.ErrInvalid, hcn.ErrInUse, hcn.ErrAlreadyAttached} {
			if errors.Is(err, typed) {
				t.Fatalf("E_FAIL mapped to %v", typed)
			}
		}
	})
}

func testRollbackWhenAttachFails(t *testing.T) {
	svc, n := emuSetup(t)
	mgr := newManager(svc, lowPriority(hcn.ManagerConfig{AllowOverlap: emuNetworksOverlap, Network: hcn.NetworkSpec{Name: n.Name}}))
	nsID := createNamespace(t)
	// HNS fails the attach
	f, _ := json.Marshal(hcnsim.Fault{Op: hcnsim.OpAddNamespaceEndpoint, Kind: "internal"})
	emu(t, "Emu.InjectFault", string(f))
	_, _, err := mgr.Ensure(emuBG, hcn.Desired{SandboxID: "emu-rollback", Namespace: nsID,
		Policies: []hcn.PortMappingPolicy{{Protocol: hcn.TCP, ExternalPort: 28080, InternalPort: 80}}})
	var se *hcn.StepError
	if !errors.As(err, &se) || se.Step != hcn.StepAttachEndpoint {
		t.Fatalf("Ensure: %v, want an attach step error", err)
	}
	if eps, err := svc.ListEndpointsByName(emuBG, mgr.EndpointName("emu-rollback")); err != nil || len(eps) != 0 {
		t.Fatalf("rollback left %+v (%v)", eps, err)
	}
}

func TestTimeoutAndLateResult(t *testing.T) {
	svc, n := emuSetup(t)
	emu(t, "Emu.SetLatency", "800")
	defer emu(t, "Emu.SetLatency", "0")
	bounded := hcn.Bounded(svc, 100*time.Millisecond)
	_, err := bounded.CreateEndpoint(emuBG, hcn.EndpointSpec{Name: "emu-late", NetworkID: n.ID})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("slow HNS: %v, want DeadlineExceeded", err)
	}
	emu(t, "Emu.SetLatency", "0")
	// HNS finishes the create after we gave up: the endpoint shows up, ours by name
	deadline := time.Now().Add(10 * time.Second)
	for {
		eps, err := svc.ListEndpointsByName(emuBG, "emu-late")
		if err == nil && len(eps) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("late endpoint never appeared: %+v %v", eps, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// createNamespace creates a namespace as containerd creates a pod's.
func createNamespace(t *testing.T) hcn.GUID {
	t.Helper()
	ns, err := (&hcsshim.HostComputeNamespace{}).Create()
	if err != nil {
		t.Fatalf("creating a namespace: %v", err)
	}
	return hcn.ParseGUID(ns.Id)
}

// Issue 10, error classification: each HRESULT HNS was seen answering, as
// unmodified hcsshim reports it, maps to the typed error that decides what
// the plugin does (port in use and invalid are final; a stopped manager is
// retried; anything else is unclassified and retried a bounded number of
// times).
func TestHRESULTClassification(t *testing.T) {
	svc, n := emuSetup(t)
	typed := []error{hcn.ErrNotFound, hcn.ErrPortInUse, hcn.ErrInvalid, hcn.ErrInUse, hcn.ErrAlreadyAttached, hcn.ErrUnavailable, hcn.ErrExists,
		hcn.ErrAttachFailed, hcn.ErrNotInstalled}
	tests := []struct {
		name, hr string
		want     error // nil: unclassified
	}{
		{"port held by a host process (ERROR_SHARING_VIOLATION)", "0x80070020", hcn.ErrPortInUse},
		{"already exists (ERROR_ALREADY_EXISTS)", "0x800700B7", hcn.ErrPortInUse},
		{"HCN_E_REQUEST_UNSUPPORTED", "0x803B0015", hcn.ErrInvalid},
		{"HCN_E_ADDR_INVALID_OR_RESERVED", "0x803B002F", hcn.ErrInvalid},
		{"HCN_E_MANAGER_STOPPED", "0x803B0020", hcn.ErrUnavailable},
		// issue 30, 7: HNS's RPC endpoint gone while it restarts, and a
		// namespace whose compartment is not there: retried
		{"RPC_S_SERVER_UNAVAILABLE", "0x800706BA", hcn.ErrUnavailable},
		{"RPC_S_CALL_FAILED", "0x800706BE", hcn.ErrUnavailable},
		{"EPT_S_NOT_REGISTERED", "0x800706D9", hcn.ErrUnavailable},
		{"GCN_E_NETCOMPARTMENT_NOT_FOUND", "0x803B0027", hcn.ErrAttachFailed},
		{"HCN_E_NAMESPACE_ATTACH_FAILED", "0x803B002E", hcn.ErrAttachFailed},
		{"E_FAIL", "0x80004005", nil},
		// issue 24, 9 and 11
		{"the object already exists (ERROR_OBJECT_ALREADY_EXISTS, the text of moby 23086)", "0x80071392", hcn.ErrPortInUse},
		{"HCN_E_POLICY_ALREADY_EXISTS", "0x803B0012", hcn.ErrPortInUse},
		{"HCN_E_MAPPING_NOT_SUPPORTED", "0x803B0016", hcn.ErrInvalid},
		{"HCN_E_ENDPOINT_NOT_FOUND", "0x803B0002", hcn.ErrNotFound},
	}
	spec := hcn.EndpointSpec{Name: "emu-hr", NetworkID: n.ID,
		PortMappings: []hcn.PortMappingPolicy{{Protocol: hcn.TCP, ExternalPort: 18990, InternalPort: 80, Flags: 1}}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			emu(t, "Emu.InjectHRESULT", "HcnCreateEndpoint", tt.hr)
			_, err := svc.CreateEndpoint(emuBG, spec)
			if err == nil {
				t.Fatal("want an error")
			}
			for _, e := range typed {
				if errors.Is(err, e) != (e == tt.want) {
					t.Fatalf("HRESULT %s: adapter error %v; want %v", tt.hr, err, tt.want)
				}
			}
		})
	}
	// port mapping not supported on the network: final, and the error says so
	emu(t, "Emu.InjectHRESULT", "HcnCreateEndpoint", "0x803B0016")
	if _, err := svc.CreateEndpoint(emuBG, spec); !errors.Is(err, hcn.ErrInvalid) || !strings.Contains(err.Error(), "not supported on") {
		t.Fatalf("HCN_E_MAPPING_NOT_SUPPORTED: %v", err)
	}
	// a NAT network where HNS takes one only
	emu(t, "Emu.InjectHRESULT", "HcnCreateNetwork", "0x803B0010")
	if _, err := svc.CreateNetwork(emuBG, hcn.NetworkSpec{Name: "emu-second-nat", Type: hcn.NetworkNAT}); !errors.Is(err, hcn.ErrExists) {
		t.Fatalf("HCN_E_NETWORK_ALREADY_EXISTS: %v", err)
	}
	emu(t, "Emu.InjectHRESULT", "HcnCreateNetwork", "0x80071392")
	if _, err := svc.CreateNetwork(emuBG, hcn.NetworkSpec{Name: "emu-second-nat", Type: hcn.NetworkNAT}); !errors.Is(err, hcn.ErrExists) {
		t.Fatalf("ERROR_OBJECT_ALREADY_EXISTS on a network: %v", err)
	}
	// a sharing violation on a call that claims no port is not "port in use"
	emu(t, "Emu.InjectHRESULT", "HcnCreateEndpoint", "0x80070020")
	if _, err := svc.CreateEndpoint(emuBG, hcn.EndpointSpec{Name: "emu-hr-noport", NetworkID: n.ID}); errors.Is(err, hcn.ErrPortInUse) {
		t.Fatalf("no port mapping, yet %v", err)
	}
}

// Issue 10, item 5, through unmodified hcsshim: after an HNS restart the
// manager's full listing notices its endpoint is gone and the next Ensure
// builds a new one; a stale endpoint left by a reboot (naming a namespace
// that is gone) is removed — the detach's not-found is ignored — and its
// port is free again.
func testHNSRestartAndStaleEndpoint(t *testing.T) {
	svc, n := emuSetup(t)
	mgr := newManager(svc, lowPriority(hcn.ManagerConfig{AllowOverlap: emuNetworksOverlap, Network: hcn.NetworkSpec{Name: n.Name}}))
	ns := createNamespace(t)
	want := hcn.Desired{SandboxID: "emu-restart", Namespace: ns, Policies: []hcn.PortMappingPolicy{{Protocol: hcn.TCP, ExternalPort: 28090, InternalPort: 80}}}
	first, _, err := mgr.Ensure(emuBG, want)
	if err != nil {
		t.Fatal(err)
	}
	emu(t, "Emu.RestartHNS")
	if owned, err := mgr.Owned(emuBG); err != nil || len(owned) != 0 {
		t.Fatalf("Owned after the restart = %+v, %v", owned, err)
	}
	again, outcome, err := mgr.Ensure(emuBG, want)
	if err != nil || outcome != hcn.Created || again.ID == first.ID {
		t.Fatalf("Ensure after the restart = %+v, %s, %v; want a new endpoint", again, outcome, err)
	}
	if got, err := svc.GetNamespace(emuBG, ns); err != nil || len(got.Endpoints) != 1 {
		t.Fatalf("namespace after the rebuild = %+v, %v", got, err)
	}

	gone := hcn.GUID("5A7E0000-0000-4000-8000-00000000E017")
	spec, _ := json.Marshal(hcn.EndpointSpec{Name: mgr.EndpointName("emu-stale"), NetworkID: n.ID,
		PortMappings: []hcn.PortMappingPolicy{{Protocol: hcn.TCP, ExternalPort: 28091, InternalPort: 80}}})
	emu(t, "Emu.AddStaleEndpoint", string(spec), gone.String())
	stale, err := svc.ListEndpointsByName(emuBG, mgr.EndpointName("emu-stale"))
	if err != nil || len(stale) != 1 || stale[0].Namespace != gone {
		t.Fatalf("stale endpoint as read = %+v, %v; want one naming %s", stale, err, gone)
	}
	if _, err := mgr.Apply(emuBG, hcn.Removal(stale[:1])); err != nil {
		t.Fatalf("removing the stale endpoint: %v", err)
	}
	if left, err := svc.ListEndpointsByName(emuBG, mgr.EndpointName("emu-stale")); err != nil || len(left) != 0 {
		t.Fatalf("after removal: %+v, %v", left, err)
	}
	if _, _, err := mgr.Ensure(emuBG, hcn.Desired{SandboxID: "emu-next", Namespace: ns,
		Policies: []hcn.PortMappingPolicy{{Protocol: hcn.TCP, ExternalPort: 28091, InternalPort: 80}}}); err != nil {
		t.Fatalf("the stale endpoint's port: %v", err)
	}
}

// TestAdapterUnderEveryHNSRule runs the manager through unmodified hcsshim
// against the emulator once per variant of the HNS rules nobody has
// verified on a real node (hcnsim.Rules): delete of an attached endpoint
// refused or allowed, namespace deletion clearing or leaving the GUID, the
// name filter exact or case-insensitive.
func TestAdapterUnderEveryHNSRule(t *testing.T) {
	tests := []struct {
		name string
		fn   func(*testing.T)
	}{
		{"RollbackWhenAttachFails", testRollbackWhenAttachFails},
		{"HNSRestartAndStaleEndpoint", testHNSRestartAndStaleEndpoint},
		{"LifecycleAndForeignNames", testLifecycleAndForeignNames},
		{"RouteTable", testRouteTable},
	}
	defer emu(t, "Emu.SetRules", "{}")
	for _, rules := range hcnsim.AllRules() {
		raw, _ := json.Marshal(rules)
		t.Run(rules.String(), func(t *testing.T) {
			emu(t, "Emu.SetRules", string(raw))
			for _, tc := range tests {
				t.Run(tc.name, tc.fn)
			}
		})
	}
}

// testLifecycleAndForeignNames: create, attach, the pod's namespace deleted
// under the endpoint, then Remove; an endpoint named like ours in other case
// survives it all.
func testLifecycleAndForeignNames(t *testing.T) {
	svc, n := emuSetup(t)
	mgr := newManager(svc, lowPriority(hcn.ManagerConfig{AllowOverlap: emuNetworksOverlap, Network: hcn.NetworkSpec{Name: n.Name}}))
	ns := createNamespace(t)
	id := fmt.Sprintf("emu-life-%d", time.Now().UnixNano())
	foreign, err := svc.CreateEndpoint(emuBG, hcn.EndpointSpec{Name: strings.ToUpper(mgr.EndpointName(id)), NetworkID: n.ID})
	if err != nil {
		t.Fatal(err)
	}
	want := hcn.Desired{SandboxID: id, Namespace: ns, Policies: []hcn.PortMappingPolicy{{Protocol: hcn.TCP, ExternalPort: 28100, InternalPort: 80}}}
	if _, _, err := mgr.Ensure(emuBG, want); err != nil {
		t.Fatal(err)
	}
	if _, out, err := mgr.Ensure(emuBG, want); err != nil || out != hcn.Unchanged {
		t.Fatalf("second Ensure = %s, %v; want unchanged", out, err)
	}
	if err := (&hcsshim.HostComputeNamespace{Id: ns.String()}).Delete(); err != nil {
		t.Fatalf("deleting the namespace: %v", err)
	}
	if _, err := mgr.Remove(emuBG, id); err != nil {
		t.Fatalf("Remove after the namespace went: %v", err)
	}
	if left, err := svc.ListEndpoints(emuBG); err != nil {
		t.Fatal(err)
	} else {
		for _, ep := range left {
			if ep.Name == mgr.EndpointName(id) {
				t.Errorf("our endpoint is left: %+v", ep)
			}
		}
		if !slices.ContainsFunc(left, func(ep hcn.Endpoint) bool { return ep.ID == foreign.ID }) {
			t.Errorf("the foreign endpoint %s named in other case was deleted", foreign.Name)
		}
	}
	// the port is free again
	if _, _, err := mgr.Ensure(emuBG, hcn.Desired{SandboxID: id + "-next", Namespace: createNamespace(t), Policies: want.Policies}); err != nil {
		t.Fatalf("the port after Remove: %v", err)
	}
	if _, err := mgr.Remove(emuBG, id+"-next"); err != nil {
		t.Fatal(err)
	}
	if err := svc.DeleteEndpoint(emuBG, foreign.ID); err != nil {
		t.Fatal(err)
	}
}

// testRouteTable: with a CNI-like endpoint in the pod's namespace, ours
// (low-priority) leaves the pod one lowest-metric default route, the
// CNI's, and the pod's own DNS (no other resolver), as the emulator's HNS model builds
// the compartment from what hcsshim sent.
func testRouteTable(t *testing.T) {
	svc, n := emuSetup(t)
	cni, err := svc.CreateNetwork(emuBG, hcn.NetworkSpec{Name: fmt.Sprintf("cbr-%d", time.Now().UnixNano()), Type: hcn.NetworkL2Bridge,
		Subnet: "10.244.7.0/24", Gateway: "10.244.7.1"})
	if err != nil {
		t.Fatal(err)
	}
	ns := createNamespace(t)
	primary, err := svc.CreateEndpoint(emuBG, hcn.EndpointSpec{Name: "cni-primary", NetworkID: cni.ID, DNS: hcn.DNS{ServerList: []string{"10.96.0.10"}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.AddNamespaceEndpoint(emuBG, ns, primary.ID); err != nil {
		t.Fatal(err)
	}
	mgr := newManager(svc, lowPriority(hcn.ManagerConfig{AllowOverlap: emuNetworksOverlap, Network: hcn.NetworkSpec{Name: n.Name}}))
	id := fmt.Sprintf("emu-route-%d", time.Now().UnixNano())
	ep, _, err := mgr.Ensure(emuBG, hcn.Desired{SandboxID: id, Namespace: ns, DNS: primary.DNS}) // the pod's DNS
	if err != nil {
		t.Fatal(err)
	}
	if len(ep.Routes) != 1 || ep.Routes[0].NextHop != "172.29.0.1" || ep.Routes[0].Metric != 5000 || !slices.Equal(ep.DNS.ServerList, primary.DNS.ServerList) {
		t.Errorf("our endpoint as HNS reports it: routes %v, DNS %v", ep.Routes, ep.DNS)
	}
	var st hcnsim.State
	if err := json.Unmarshal([]byte(emu(t, "Emu.State")), &st); err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(st.Namespaces, func(x hcnsim.Namespace) bool { return x.ID == ns })
	if i < 0 {
		t.Fatalf("namespace %s not in the emulator", ns)
	}
	defaults := st.Namespaces[i].DefaultRoutes()
	if len(defaults) != 2 || defaults[0].NextHop != "10.244.7.1" || defaults[1].Metric <= defaults[0].Metric {
		t.Errorf("namespace default routes %v: want the CNI's alone at the lowest metric", defaults)
	}
	if dns := st.Namespaces[i].DNSServers; !slices.Equal(dns, []string{"10.96.0.10", "10.96.0.10"}) && !slices.Equal(dns, []string{"10.96.0.10"}) {
		t.Errorf("namespace DNS %v, want the pod's alone", dns)
	}
	if _, err := mgr.Remove(emuBG, id); err != nil {
		t.Fatal(err)
	}
}

// TestGoldenEndpointJSON: the exact endpoint JSON HNS receives from the
// manager through hcsshim, per default_route mode (routes with metric, an
// empty Dns), against hcn/testdata/endpoint-<mode>.json.
func TestGoldenEndpointJSON(t *testing.T) {
	for _, mode := range hcn.RouteModes() {
		t.Run(string(mode), func(t *testing.T) {
			svc, n := emuSetup(t)
			mgr := newManager(svc, hcn.ManagerConfig{AllowOverlap: emuNetworksOverlap, Network: hcn.NetworkSpec{Name: n.Name}, DefaultRoute: mode, RouteMetric: 5000, OutboundNAT: true})
			if _, _, err := mgr.Ensure(emuBG, hcn.Desired{SandboxID: "golden", Namespace: createNamespace(t),
				Policies: []hcn.PortMappingPolicy{{Protocol: hcn.TCP, ExternalPort: 28200, InternalPort: 80, Flags: hcn.NatFlagsLocalRoutedVip}}}); err != nil {
				t.Fatal(err)
			}
			got := emu(t, "Emu.LastSettings", "HcnCreateEndpoint")
			got = strings.ReplaceAll(strings.ReplaceAll(got, n.ID, "<network>"), strings.ToLower(n.ID), "<network>")
			file := "testdata/endpoint-" + string(mode) + ".json"
			want, err := os.ReadFile(file)
			if err != nil {
				t.Fatalf("%v (HNS received %s)", err, got)
			}
			if got != strings.TrimSpace(string(want)) {
				t.Errorf("HNS received\n%s\nwant (%s)\n%s", got, file, want)
			}
			if _, err := mgr.Remove(emuBG, "golden"); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// Issue 24, 2, through hcsshim: an HNS that stores no endpoint routes reads
// every endpoint back without them; the manager learns that at the create
// and does not rebuild the endpoint at the next Ensure. Both rule variants.
func TestEndpointWithoutStoredRoutesIsNotRebuilt(t *testing.T) {
	svc, n := emuSetup(t)
	defer emu(t, "Emu.SetRules", "{}")
	for _, dropped := range []bool{false, true} {
		t.Run(fmt.Sprintf("routes-dropped=%v", dropped), func(t *testing.T) {
			raw, _ := json.Marshal(hcnsim.Rules{DropRoutes: dropped})
			emu(t, "Emu.SetRules", string(raw))
			mgr := newManager(svc, lowPriority(hcn.ManagerConfig{AllowOverlap: emuNetworksOverlap, Network: hcn.NetworkSpec{Name: n.Name}}))
			ns := createNamespace(t)
			id := fmt.Sprintf("routes-%v", dropped)
			d := hcn.Desired{SandboxID: id, Namespace: ns, Policies: []hcn.PortMappingPolicy{{Protocol: hcn.TCP, ExternalPort: 28190, InternalPort: 80}}}
			first, _, err := mgr.Ensure(emuBG, d)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _, _ = mgr.Remove(emuBG, id) })
			if len(first.Routes) == 0 != dropped {
				t.Fatalf("created endpoint reads back with routes %v (dropped %v)", first.Routes, dropped)
			}
			again, out, err := mgr.Ensure(emuBG, d)
			if err != nil || out != hcn.Unchanged || again.ID != first.ID {
				t.Fatalf("second Ensure = %v, %v: rebuilt", out, err)
			}
		})
	}
}

// Issue 38, through hcsshim: the adapter writes the pod's whole DNS (its
// suffix, search list, resolvers and options) and reads it back; a
// PortMapping policy HNS reads back in a form the adapter cannot decode is
// kept as Undecoded, never dropped, and the manager adopts the endpoint
// rather than rebuild it (a rebuild would read back the same).
func TestTheAdapterKeepsDNSAndWhatItCannotDecode(t *testing.T) {
	svc, n := emuSetup(t)
	defer emu(t, "Emu.SetRules", "{}")
	dns := hcn.DNS{Domain: "ns.svc.cluster.local", Search: []string{"ns.svc.cluster.local", "svc.cluster.local"},
		ServerList: []string{"10.96.0.10"}, Options: []string{"ndots:5"}}
	for _, unknown := range []bool{false, true} {
		t.Run(fmt.Sprintf("flag-name-unknown=%v", unknown), func(t *testing.T) {
			raw, _ := json.Marshal(hcnsim.Rules{FlagNameUnknown: unknown})
			emu(t, "Emu.SetRules", string(raw))
			mgr := newManager(svc, lowPriority(hcn.ManagerConfig{AllowOverlap: emuNetworksOverlap, Network: hcn.NetworkSpec{Name: n.Name}}))
			id := fmt.Sprintf("undecoded-%v", unknown)
			d := hcn.Desired{SandboxID: id, Namespace: createNamespace(t), DNS: dns,
				Policies: []hcn.PortMappingPolicy{{Protocol: hcn.TCP, ExternalPort: 28290, InternalPort: 80, Flags: hcn.NatFlagsLocalRoutedVip}}}
			first, _, err := mgr.Ensure(emuBG, d)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _, _ = mgr.Remove(emuBG, id) })
			back, err := svc.GetEndpoint(emuBG, first.ID)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(back.DNS.Search, dns.Search) || back.DNS.Domain != dns.Domain || !slices.Equal(back.DNS.ServerList, dns.ServerList) ||
				!slices.Equal(back.DNS.Options, dns.Options) {
				t.Errorf("DNS read back %+v, want %+v", back.DNS, dns)
			}
			if unknown && (len(back.PortMappings) != 0 || len(back.Undecoded) != 1 || !strings.Contains(back.Undecoded[0], "FlagOfANewerBuild")) {
				t.Errorf("a policy read back with an unknown flag: decoded %v, undecoded %q; want it kept as undecoded", back.PortMappings, back.Undecoded)
			}
			if !unknown && (len(back.PortMappings) != 1 || len(back.Undecoded) != 0) {
				t.Errorf("decoded %v, undecoded %q", back.PortMappings, back.Undecoded)
			}
			again, out, err := mgr.Ensure(emuBG, d)
			if err != nil || out != hcn.Unchanged || again.ID != first.ID {
				t.Fatalf("second Ensure = %v, %v: rebuilt", out, err)
			}
		})
	}
}

// Issue 24, 8 and 11, through hcsshim: removal gets to the delete however
// the detach ends. HCN_E_ENDPOINT_NOT_ATTACHED (not mapped before) on the
// detach of an endpoint that is not attached any more, and an unmapped
// failure: the endpoint is still deleted, its host port free. An endpoint
// HNS says is not found on delete (HCN_E_ENDPOINT_NOT_FOUND) is gone: done.
func TestRemovalGetsToTheDelete(t *testing.T) {
	svc, n := emuSetup(t)
	mgr := newManager(svc, lowPriority(hcn.ManagerConfig{AllowOverlap: emuNetworksOverlap, Network: hcn.NetworkSpec{Name: n.Name}}))
	for i, tc := range []struct{ name, fn, hr string }{
		{"detach: HCN_E_ENDPOINT_NOT_ATTACHED", "HcnModifyNamespace", "0x803B0034"},
		{"detach: an unmapped failure", "HcnModifyNamespace", "0x803B002E"},
		{"delete: HCN_E_ENDPOINT_NOT_FOUND", "HcnDeleteEndpoint", "0x803B0002"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := createNamespace(t)
			id := "emu-removal-" + tc.hr
			ep, _, err := mgr.Ensure(emuBG, hcn.Desired{SandboxID: id, Namespace: ns,
				Policies: []hcn.PortMappingPolicy{{Protocol: hcn.TCP, ExternalPort: uint16(28095 + i), InternalPort: 80}}})
			if err != nil {
				t.Fatal(err)
			}
			view := *ep // what the plugin knows: attached
			if tc.fn == "HcnModifyNamespace" {
				if err := svc.RemoveNamespaceEndpoint(emuBG, ns, ep.ID); err != nil { // HNS detached it already
					t.Fatal(err)
				}
			} else {
				if err := svc.RemoveNamespaceEndpoint(emuBG, ns, ep.ID); err != nil {
					t.Fatal(err)
				}
				view.Namespace = ""
				if err := svc.DeleteEndpoint(emuBG, ep.ID); err != nil { // HNS lost it already
					t.Fatal(err)
				}
			}
			emu(t, "Emu.InjectHRESULT", tc.fn, tc.hr)
			if _, err := mgr.Apply(emuBG, hcn.Removal([]hcn.Endpoint{view})); err != nil {
				t.Fatalf("Delete: %v", err)
			}
			if eps, err := svc.ListEndpointsByName(emuBG, mgr.EndpointName(id)); err != nil || len(eps) != 0 {
				t.Fatalf("left %+v (%v)", eps, err)
			}
		})
	}
}

// Issue 26: a CNI's endpoint with an HNS v1 NAT policy on an L2Bridge
// network (win-bridge apiVersion 1; Windows-Containers 360), read through
// unmodified hcsshim, is seen as the provider of its host port and judged
// not to work, whether HNS shows a v1 NAT policy through the v2 API as a
// PortMapping or as its own type (not verified on a host: both variants of
// hcnsim.Rules.V1NATAsPortMapping). A local-routed v2 PortMapping next to it
// is judged to work.
func TestV1NATPolicyOnL2BridgeUnderBothReadings(t *testing.T) {
	defer emu(t, "Emu.SetRules", "{}")
	for _, asPortMapping := range []bool{false, true} {
		t.Run(fmt.Sprintf("V1NATAsPortMapping=%v", asPortMapping), func(t *testing.T) {
			raw, _ := json.Marshal(hcnsim.Rules{V1NATAsPortMapping: asPortMapping})
			emu(t, "Emu.SetRules", string(raw))
			svc, err := hcn.NewWindowsService(emuBG, hcn.NewLimiter(4))
			if err != nil {
				t.Fatal(err)
			}
			bridge, err := svc.CreateNetwork(emuBG, hcn.NetworkSpec{Name: fmt.Sprintf("cbr0-%d", time.Now().UnixNano()), Type: hcn.NetworkL2Bridge,
				Subnet: "10.244.7.0/24", Gateway: "10.244.7.1", Adapter: "Ethernet 2"})
			if err != nil {
				t.Fatal(err)
			}
			spec, _ := json.Marshal(hcn.EndpointSpec{Name: fmt.Sprintf("cbr0_v1nat_%v", asPortMapping), NetworkID: bridge.ID,
				NATPolicies:  []hcn.PortMappingPolicy{{Protocol: hcn.TCP, ExternalPort: 18093, InternalPort: 80}},
				PortMappings: []hcn.PortMappingPolicy{{Protocol: hcn.TCP, ExternalPort: 18094, InternalPort: 81, Flags: hcn.NatFlagsLocalRoutedVip}}})
			cni := emu(t, "Emu.CreateEndpoint", string(spec))
			ns := createNamespace(t)
			if err := svc.AddNamespaceEndpoint(emuBG, ns, cni); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				_ = svc.RemoveNamespaceEndpoint(emuBG, ns, cni)
				_ = svc.DeleteEndpoint(emuBG, cni)
			})
			mgr := newManager(svc, lowPriority(hcn.ManagerConfig{AllowOverlap: emuNetworksOverlap, Prefix: "hcnpm-v1nat-"}))
			got, err := mgr.Neighbours(emuBG, ns, "sandbox")
			if err != nil {
				t.Fatal(err)
			}
			typ, err := mgr.NetworkType(emuBG, bridge.ID)
			if err != nil || typ != hcn.NetworkL2Bridge {
				t.Fatalf("NetworkType = %q, %v; want L2Bridge", typ, err)
			}
			for _, tc := range []struct {
				port  uint16
				works bool
			}{{18093, false}, {18094, true}} {
				pv := hcn.ProvidedBy(hcn.PortMappingPolicy{Protocol: hcn.TCP, ExternalPort: tc.port, InternalPort: 80}, got)
				if pv == nil {
					t.Fatalf("port %d: the CNI's mapping is not seen in %+v", tc.port, got)
				}
				if ok, why, fix := pv.Effective(typ); ok != tc.works || (!ok && (!strings.Contains(why, cni) || fix == "")) {
					t.Errorf("port %d: Effective = %v %q %q, want %v naming %s", tc.port, ok, why, fix, tc.works, cni)
				}
			}
		})
	}
}
