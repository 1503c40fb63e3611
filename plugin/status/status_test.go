package status

import (
	"context"
	"strings"
	"testing"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/config"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn/hcnsim"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin"
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
