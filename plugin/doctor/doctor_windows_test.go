//go:build windows && hnsemu

package doctor

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/config"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn/hcnsim"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/test/hnsemu"
)

// TestSelfTestThroughHcsshim runs the checks and the self-test through
// unmodified hcsshim against the HNS emulator (make test-windows), under
// every variant of the unverified HNS rules: the version, the network, and
// the endpoint read back field by field as HNS's JSON carried it.
func TestSelfTestThroughHcsshim(t *testing.T) {
	addr := os.Getenv("HNS_EMULATOR")
	if addr == "" {
		t.Fatal("HNS_EMULATOR is not set: run these tests with make test-windows")
	}
	emu := func(fn string, args ...string) {
		t.Helper()
		if hr, _, res, err := hnsemu.Call(addr, fn, args...); err != nil || hr != 0 {
			t.Fatalf("emulator %s: %#x %s %v", fn, hr, res, err)
		}
	}
	svc, err := hcn.NewWindowsService(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	cfg.HCN.Network = fmt.Sprintf("doctor-%d", time.Now().UnixNano())
	cfg.HCN.OutboundNAT = true
	cfg.Kubernetes.Enabled = true // the node as the chart runs it: the annotation's Pod Security is read
	if _, err := svc.CreateNetwork(ctx, hcn.NetworkSpec{Name: cfg.HCN.Network, Type: hcn.NetworkNAT, Subnet: "172.28.0.0/24", Gateway: "172.28.0.1"}); err != nil {
		t.Fatal(err)
	}
	defer emu("Emu.SetRules", "{}")
	for _, rules := range hcnsim.AllRules() {
		t.Run(rules.String(), func(t *testing.T) {
			raw, _ := json.Marshal(rules)
			emu("Emu.SetRules", string(raw))
			d := &Doctor{Config: cfg, HNS: svc, Windows: true}
			rep := d.Run(ctx)
			rep.Results = append(rep.Results, d.SelfTest(ctx, SelfTestOptions{HostPort: 47998}).Results...)
			if !rep.Fit() {
				t.Fatalf("not fit: %+v", rep.Results)
			}
			for check, detail := range map[string]string{
				"HNS":                        "version 15.1",
				"network " + cfg.HCN.Network: "gateway 172.28.0.1",
				"selftest: read back":        "routes [0.0.0.0/0 via 172.28.0.1 metric 5000], DNS servers 10.96.0.10 search default.svc.cluster.local,svc.cluster.local, OutBoundNAT true",
				"selftest: cleanup":          "removed",
			} {
				if st, got := statusOf(rep, check); st != Pass || !strings.Contains(got, detail) {
					t.Errorf("%s = %s %q; want pass ~%q", check, st, got, detail)
				}
			}
			eps, err := svc.ListEndpoints(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, ep := range eps {
				if strings.HasPrefix(ep.Name, SelfTestPrefix) {
					t.Errorf("left behind: %+v", ep)
				}
			}
		})
	}
}

// The self-test attaches its endpoint to a namespace made as containerd
// makes a pod's (no type: HNS makes it Host), never to HostDefault, the
// host's own compartment: on a node a vNIC with a default route there would
// change the host's own networking.
func TestSelfTestUsesAPodTypeNamespace(t *testing.T) {
	addr := os.Getenv("HNS_EMULATOR")
	if addr == "" {
		t.Fatal("HNS_EMULATOR is not set: run these tests with make test-windows")
	}
	svc, err := hcn.NewWindowsService(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	cfg.HCN.Network = fmt.Sprintf("doctor-ns-%d", time.Now().UnixNano())
	if _, err := svc.CreateNetwork(ctx, hcn.NetworkSpec{Name: cfg.HCN.Network, Type: hcn.NetworkNAT, Subnet: "172.27.0.0/24", Gateway: "172.27.0.1"}); err != nil {
		t.Fatal(err)
	}
	d := &Doctor{Config: cfg, HNS: svc, Windows: true}
	if rep := d.SelfTest(ctx, SelfTestOptions{HostPort: 47997, Keep: true}); !rep.Fit() {
		t.Fatalf("not fit: %+v", rep.Results)
	}
	defer d.SelfTest(ctx, SelfTestOptions{HostPort: 47997}) // removes what was kept
	hr, out, res, err := hnsemu.Call(addr, "Emu.State")
	if err != nil || hr != 0 {
		t.Fatalf("Emu.State: %#x %s %v", hr, res, err)
	}
	var st hcnsim.State
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatal(err)
	}
	var attached []string
	for _, ep := range st.Endpoints {
		if !strings.HasPrefix(ep.Name, SelfTestPrefix) {
			continue
		}
		for _, ns := range st.Namespaces {
			if ns.ID == ep.Namespace {
				attached = append(attached, ns.Type)
			}
		}
	}
	if len(attached) != 1 || attached[0] != hcnsim.NamespaceHost {
		t.Fatalf("the self-test's endpoint is in namespaces of types %v, want one of type Host", attached)
	}
}
