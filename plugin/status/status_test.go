package status

import (
	"context"
	"net/netip"
	"strings"
	"testing"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/config"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn/hcnsim"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/hostsockets"
)

type store map[string]string // sandbox ID -> "namespace/name"; missing: gone

func (s store) Sandbox(_ context.Context, id string) (*plugin.SandboxInfo, error) {
	name, ok := s[id]
	if !ok {
		return nil, plugin.ErrSandboxNotFound
	}
	ns, pod, _ := strings.Cut(name, "/")
	md := `{"Version":"v1","Metadata":{"Config":{"metadata":{"name":"` + pod + `","namespace":"` + ns + `"}}}}`
	return &plugin.SandboxInfo{ID: id, IsSandbox: true, Metadata: []byte(md)}, nil
}
func (store) TaskState(context.Context, string) (plugin.TaskState, error) {
	return plugin.TaskRunning, nil
}
func (store) ListSandboxes(context.Context) ([]string, error) { return nil, nil }

// Rows come in the same order every run (by namespace and pod, not by
// endpoint GUID), with the pod's name from containerd and orphans marked.
func TestEntriesSortedWithNamesAndOrphans(t *testing.T) {
	mgr := hcn.NewManager(hcnsim.New(), plugin.ManagerConfig(config.Default().HCN))
	eps := []hcn.Endpoint{
		{ID: "C", Name: mgr.EndpointName("s3"), Namespace: "ns3"},
		{ID: "A", Name: mgr.EndpointName("s1"), Namespace: "ns1"},
		{ID: "B", Name: mgr.EndpointName("gone")},
		{ID: "D", Name: mgr.EndpointName("s2"), Namespace: "ns2"},
	}
	st := store{"s1": "web/b", "s2": "web/a", "s3": "api/z"}
	got := Entries(context.Background(), mgr, st, eps)
	want := []struct{ ns, pod, sandbox, state string }{
		{"", "", "gone", "orphaned"}, {"api", "z", "s3", "attached"}, {"web", "a", "s2", "attached"}, {"web", "b", "s1", "attached"},
	}
	if len(got) != len(want) {
		t.Fatalf("%d entries", len(got))
	}
	for i, w := range want {
		if g := got[i]; g.Namespace != w.ns || g.Pod != w.pod || g.Sandbox != w.sandbox || g.State != w.state {
			t.Errorf("row %d = %s/%s %s %s, want %+v", i, g.Namespace, g.Pod, g.Sandbox, g.State, w)
		}
	}
}

// Issue 26: status says who maps each host port: the plugin's endpoint, or
// the CNI's (and when a CNI mapping will not work); a pod whose host ports
// the CNI maps all has a row without an endpoint of ours.
func TestStatusSaysWhoMapsEachPort(t *testing.T) {
	ours := hcn.PortMappingPolicy{Protocol: hcn.TCP, ExternalPort: 9002, InternalPort: 80, Flags: 1}
	cniPolicy := hcn.PortMappingPolicy{Protocol: hcn.TCP, ExternalPort: 9001, InternalPort: 80}
	entries := []Entry{{Pod: "web", Namespace: "shop", Sandbox: "sb1", Endpoint: "EP1", State: "attached", Mappings: []hcn.PortMappingPolicy{ours}}}
	entries = WithCNI(entries, []plugin.SandboxMappings{
		{Sandbox: "sb1", Pod: "shop/web", Endpoint: "EP1", Ours: []hcn.PortMappingPolicy{ours},
			CNI: []plugin.CNIMapping{{Policy: cniPolicy, Endpoint: "CNI00001-0000", Works: true}}},
		{Sandbox: "sb2", Pod: "shop/api", CNI: []plugin.CNIMapping{{Policy: cniPolicy, Endpoint: "CNI00002-0000", Works: false}}},
	})
	var b strings.Builder
	if err := Write(&b, entries, "table"); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"*:9002->80/tcp, *:9001->80/tcp (cni CNI00001)", "api", "cni", "*:9001->80/tcp (cni CNI00002, will not work)"} {
		if !strings.Contains(out, want) {
			t.Errorf("status table lacks %q:\n%s", want, out)
		}
	}
	if len(entries) != 2 || entries[0].Pod != "api" || entries[0].Endpoint != "-" || entries[0].State != "cni" {
		t.Errorf("entries %+v", entries)
	}
}

// Issue 56: a program of the node that bound a host port after our
// endpoint mapped it is shown beside the mapping that shadows it, in the
// table and in JSON; a mapping on another host IP than the program's is not.
func TestStatusShowsAProgramAMappingShadows(t *testing.T) {
	sqlPort := hcn.PortMappingPolicy{Protocol: hcn.TCP, ExternalPort: 1433, InternalPort: 1433, Flags: 1}
	elsewhere := hcn.PortMappingPolicy{Protocol: hcn.TCP, ExternalPort: 6516, InternalPort: 80, VIP: "10.0.0.4", Flags: 1}
	rtp := []hcn.PortMappingPolicy{{Protocol: hcn.UDP, ExternalPort: 20000, InternalPort: 20000, Flags: 1},
		{Protocol: hcn.UDP, ExternalPort: 20001, InternalPort: 20001, Flags: 1}, {Protocol: hcn.UDP, ExternalPort: 20002, InternalPort: 20002, Flags: 1}}
	entries := []Entry{{Pod: "db", Namespace: "shop", Sandbox: "sb1", Endpoint: "EP1", State: "attached",
		Mappings: append([]hcn.PortMappingPolicy{sqlPort, elsewhere}, rtp...)}}
	if got := hostsockets.PortsOf(Mapped(entries)); len(got) != 5 {
		t.Fatalf("ports read: %v, want 1433, 6516 and the three of the range", got)
	}
	entries = WithShadowed(entries, []hostsockets.Socket{
		{Protocol: hcn.TCP, Addr: netip.MustParseAddr("0.0.0.0"), Port: 1433, PID: 2100, Program: "sqlservr.exe"},
		{Protocol: hcn.TCP, Addr: netip.MustParseAddr("10.0.0.5"), Port: 6516, PID: 3300, Program: "sme.exe"},
	})
	var table, js strings.Builder
	if err := Write(&table, entries, "table"); err != nil {
		t.Fatal(err)
	}
	if err := Write(&js, entries, "json"); err != nil {
		t.Fatal(err)
	}
	says := "*:1433->1433/tcp (shadows sqlservr.exe (PID 2100) listening on 0.0.0.0:1433/tcp)"
	if !strings.Contains(table.String(), says) || strings.Contains(table.String(), "sme.exe") {
		t.Errorf("status table:\n%s\nwant %q and nothing of sme.exe (another host IP)", table.String(), says)
	}
	if !strings.Contains(table.String(), "*:20000-20002->20000-20002/udp") { // issue 56: a range said as one
		t.Errorf("status table:\n%s\nwant the range said as one", table.String())
	}
	if !strings.Contains(js.String(), `"socket": "sqlservr.exe (PID 2100) listening on 0.0.0.0:1433/tcp"`) {
		t.Errorf("status JSON lacks the shadowed program:\n%s", js.String())
	}
}
