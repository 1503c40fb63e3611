//go:build e2ewin

// Package e2ewin runs the product users run, nri-hcn-portmap.exe (the
// release build), under wine: against the real Linux containerd of the e2e
// harness, reached through a loopback TCP relay to its socket, with every
// HNS call going through unmodified hcsshim and the stub DLLs to the HNS
// emulator. make e2e-windows (test/hnsemu/e2e-windows.sh) sets it up.
package e2ewin

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/doctor"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/request"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/test/harness"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/test/hnsemu"
)

const config = `[plugin]
resync_interval = "0s"
` + harness.NetworkConfig

type rig struct {
	t   *testing.T
	env *harness.Env
	ctx context.Context
	emu string
}

func newRig(t *testing.T) *rig {
	t.Helper()
	wine, exe, model, emu := os.Getenv("WINE"), os.Getenv("PLUGIN_EXE"), os.Getenv("HNS_SIM_ADDRESS"), os.Getenv("HNS_EMULATOR")
	if wine == "" || exe == "" || model == "" || emu == "" {
		t.Fatal("WINE, PLUGIN_EXE, HNS_SIM_ADDRESS and HNS_EMULATOR must be set: run with make e2e-windows")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	env, err := harness.Start(ctx, harness.Options{PluginCmd: []string{wine, exe}, Windows: true, ContainerdTCP: true,
		Simulator: model, Config: config})
	if err != nil {
		t.Fatalf("starting the environment: %v", err)
	}
	if err := env.SimClient.Reset(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, p := range []*harness.Process{env.Plugin, env.Containerd} {
				if p != nil {
					t.Logf("--- %s log (tail) ---\n%s", p.Name, p.Tail(60))
				}
			}
		}
		env.Close()
	})
	return &rig{t: t, env: env, ctx: ctx, emu: emu}
}

// start runs the .exe with its Windows defaults (plugin.source = auto:
// containerd's events, as there are no NRI pod events on Windows) and waits
// for its subscription.
func (r *rig) start() {
	r.t.Helper()
	if err := r.env.StartPluginSubscribing(r.ctx); err != nil {
		r.t.Fatalf("nri-hcn-portmap.exe under wine: %v", err)
	}
}

func (r *rig) pod(name, annotation string) harness.Pod {
	id := sha256.Sum256(fmt.Appendf(nil, "%s/%s/%d", r.t.Name(), name, time.Now().UnixNano()))
	p := harness.Pod{ID: hex.EncodeToString(id[:]), Name: name, Namespace: "default", UID: "uid-" + name}
	if annotation != "" {
		p.Annotations = map[string]string{request.AnnotationPortMappings: annotation}
	}
	return p
}

// run creates the sandbox in containerd and publishes its start, as
// containerd does on a Windows node.
func (r *rig) run(p harness.Pod) hcn.GUID {
	r.t.Helper()
	guid, err := r.env.CreateSandbox(r.ctx, p)
	if err != nil {
		r.t.Fatal(err)
	}
	if err := r.env.PublishStart(r.ctx, p.ID); err != nil {
		r.t.Fatal(err)
	}
	return guid
}

func (r *rig) ours(id string) []hcn.Endpoint {
	r.t.Helper()
	st, _, err := r.env.SimClient.State(r.ctx)
	if err != nil {
		r.t.Fatal(err)
	}
	var out []hcn.Endpoint
	for _, ep := range st.Endpoints {
		if ep.Name == "nri-hcn-portmap-"+id {
			out = append(out, ep)
		}
	}
	return out
}

// toPort80 is the policy of a pod mapping host port to its port 80 (the
// defaults: every address, local routed VIP).
func toPort80(port uint16) []hcn.PortMappingPolicy {
	return []hcn.PortMappingPolicy{{Protocol: hcn.TCP, ExternalPort: port, InternalPort: 80, Flags: hcn.NatFlagsLocalRoutedVip}}
}

func (r *rig) wantEndpoint(id string, ns hcn.GUID, want []hcn.PortMappingPolicy) hcn.Endpoint {
	r.t.Helper()
	var got []hcn.Endpoint
	err := harness.Eventually(r.ctx, 20*time.Second, func() error {
		got = r.ours(id)
		if len(got) != 1 || got[0].Namespace != ns || !hcn.SamePolicies(got[0].PortMappings, want) {
			return fmt.Errorf("HNS holds %+v, want one endpoint in %s with %v", got, ns, want)
		}
		return nil
	})
	if err != nil {
		r.t.Fatal(err)
	}
	return got[0]
}

func (r *rig) wantNoEndpoint(id string) {
	r.t.Helper()
	if err := harness.Eventually(r.ctx, 20*time.Second, r.noEndpoint(id)); err != nil {
		r.t.Fatal(err)
	}
	r.neverEndpoint(id) // and it stays gone
}

// neverEndpoint holds over a window: nothing is built for the pod.
func (r *rig) neverEndpoint(id string) {
	r.t.Helper()
	if err := harness.Consistently(r.ctx, time.Second, r.noEndpoint(id)); err != nil {
		r.t.Fatal(err)
	}
}

func (r *rig) noEndpoint(id string) func() error {
	return func() error {
		if eps := r.ours(id); len(eps) != 0 {
			return fmt.Errorf("HNS holds %+v", eps)
		}
		return nil
	}
}

func (r *rig) waitMetric(sample string, want float64) {
	r.t.Helper()
	if err := r.env.WaitMetric(r.ctx, sample, want, 20*time.Second); err != nil {
		r.t.Fatal(err)
	}
}

func (r *rig) lastSettings(fn string) string {
	r.t.Helper()
	hr, out, res, err := hnsemu.Call(r.emu, "Emu.LastSettings", fn)
	if err != nil || hr != 0 {
		r.t.Fatalf("Emu.LastSettings: %#x %s %v", hr, res, err)
	}
	return out
}

// TestExeMainJob: a mapped pod started and stopped through containerd's
// events (the endpoint created, attached, removed; the exact JSON HNS
// received), a bad annotation and a denied port (nothing built, counted),
// /healthz, /metrics and status -o json answered by the .exe.
func TestExeMainJob(t *testing.T) {
	r := newRig(t)
	r.start()

	out, stderr, err := r.env.Command(r.ctx, "health")
	if err != nil || !strings.Contains(out, `"status": "ok"`) {
		t.Fatalf("health from the .exe: %v\n%s%s", err, out, stderr)
	}

	web := r.pod("web", "18080:80")
	ns := r.run(web)
	ep := r.wantEndpoint(web.ID, ns, toPort80(18080))
	got := strings.ReplaceAll(r.lastSettings("HcnCreateEndpoint"), ep.NetworkID, "<network>")
	want := `{"Name":"nri-hcn-portmap-` + web.ID + `","HostComputeNetwork":"<network>","Policies":[{"Type":"PortMapping","Settings":{"Protocol":6,"InternalPort":80,"ExternalPort":18080,"Flags":1}}],"Dns":{},"Routes":[{"NextHop":"172.30.0.1","DestinationPrefix":"0.0.0.0/0","Metric":5000}],"Health":{"Extra":{}},"SchemaVersion":{"Major":2,"Minor":0}}`
	if got != want {
		t.Errorf("HNS received\n%s\nwant\n%s", got, want)
	}
	r.waitMetric(`nri_hcn_portmap_endpoints_managed`, 1)

	entries, err := r.env.Status(r.ctx)
	if err != nil {
		t.Fatalf("status -o json from the .exe: %v", err)
	}
	if len(entries) != 1 || entries[0].Sandbox != web.ID || entries[0].Pod != "web" || entries[0].State != "attached" {
		t.Errorf("status from the .exe: %+v", entries)
	}

	bad := r.pod("bad", "18081:80/sctp")
	r.run(bad)
	r.waitMetric(`nri_hcn_portmap_operations_total{kind="event-start",result="invalid"}`, 1)
	r.neverEndpoint(bad.ID)

	denied := r.pod("denied", "80:80")
	r.run(denied)
	r.waitMetric(`nri_hcn_portmap_operations_total{kind="event-start",result="denied"}`, 1)
	r.neverEndpoint(denied.ID)

	if err := r.env.PublishExit(r.ctx, web.ID); err != nil {
		t.Fatal(err)
	}
	r.wantNoEndpoint(web.ID)
	r.waitMetric(`nri_hcn_portmap_endpoints_managed`, 0)
}

// TestExeConvergesAfterARestart: the .exe killed, a pod stopped (and its
// namespace deleted) while it was down, another started: once restarted it
// removes the one and builds the other.
func TestExeConvergesAfterARestart(t *testing.T) {
	r := newRig(t)
	r.start()
	gone := r.pod("gone", "18090:80")
	goneNS := r.run(gone)
	r.wantEndpoint(gone.ID, goneNS, toPort80(18090))

	r.env.Plugin.Kill()
	if err := r.env.SimClient.DeleteNamespace(r.ctx, goneNS); err != nil {
		t.Fatal(err)
	}
	if err := r.env.DeleteSandbox(r.ctx, gone.ID); err != nil {
		t.Fatal(err)
	}
	next := r.pod("next", "18090:80") // the same host port
	nextNS := r.run(next)

	r.start()
	r.wantNoEndpoint(gone.ID)
	r.wantEndpoint(next.ID, nextNS, toPort80(18090))
}

// TestExeDoctorAndCleanup: doctor --selftest and cleanup, run as the .exe.
func TestExeDoctorAndCleanup(t *testing.T) {
	r := newRig(t)
	r.start()
	p := r.pod("kept", "18095:80")
	ns := r.run(p)
	r.wantEndpoint(p.ID, ns, toPort80(18095))

	out, stderr, err := r.env.Command(r.ctx, "doctor", "--selftest", "-o", "json")
	var rep doctor.Report
	if jerr := json.Unmarshal([]byte(out), &rep); jerr != nil || err != nil || !rep.Fit() {
		t.Fatalf("doctor --selftest from the .exe: %v %v\n%s%s", err, jerr, out, stderr)
	}
	for check, detail := range map[string]string{
		"HNS":                 "version 15.1",
		"containerd":          r.env.CtrTCP,
		"event subscription":  "live",
		"NRI socket":          "none on Windows",
		"selftest: read back": "metric 5000",
		"selftest: cleanup":   "removed",
	} {
		found := false
		for _, x := range rep.Results {
			if x.Check == check {
				found = true
				if x.Status != doctor.Pass || !strings.Contains(x.Detail, detail) {
					t.Errorf("%s = %s %q, want pass ~%q", check, x.Status, x.Detail, detail)
				}
			}
		}
		if !found {
			t.Errorf("no check %q", check)
		}
	}

	r.env.Plugin.Stop()
	out, stderr, err = r.env.Command(r.ctx, "cleanup")
	if err != nil || !strings.Contains(out, "1 of 1 endpoints removed") {
		t.Fatalf("cleanup from the .exe: %v\n%s%s", err, out, stderr)
	}
	if eps := r.ours(p.ID); len(eps) != 0 {
		t.Errorf("after cleanup HNS holds %+v", eps)
	}
}

// Issue 24, 1: HNS is late at boot (trigger-started): its first answers to
// the plugin are failures. hcsshim's V2ApiSupported caches its first answer,
// error included, for the life of the process; a plugin that asked it never
// saw HNS come up. The .exe (a fresh process) waits for HNS and then does
// its job.
func TestExeWaitsForHNSAtBoot(t *testing.T) {
	r := newRig(t)
	for range 2 { // HNS not up yet: RPC_S_SERVER_UNAVAILABLE, twice
		if hr, _, res, err := hnsemu.Call(r.emu, "Emu.InjectHRESULT", "HNSCall", "0x800706BA"); err != nil || hr != 0 {
			t.Fatalf("Emu.InjectHRESULT: %#x %s %v", hr, res, err)
		}
	}
	r.start()
	web := r.pod("late-hns", "18082:80")
	ns := r.run(web)
	r.wantEndpoint(web.ID, ns, toPort80(18082))
}

// Issue 53: what a service reports when it cannot start reaches the event
// log. Under wine the event log writes an error event's text on its
// eventlog debug channel, to the process's Unix stderr: the service
// package's reporting child (TestAStartUpRefusalReachesTheEventLog) is run
// here, and its refusal read there.
func TestAStartUpRefusalReachesWinesEventLog(t *testing.T) {
	wine := os.Getenv("WINE")
	if wine == "" {
		t.Fatal("WINE must be set: run with make e2e-windows")
	}
	dir := t.TempDir()
	exe := filepath.Join(dir, "service.test.exe")
	build := exec.Command("go", "test", "-c", "-tags", "hnsemu", "-o", exe, "./cmd/nri-hcn-portmap/service")
	build.Dir = "../.."
	build.Env = append(os.Environ(), "GOOS=windows", "GOARCH=amd64")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the service tests: %v\n%s", err, out)
	}
	msg := fmt.Sprintf("nri-hcn-portmap cannot start: config: the refusal %d", time.Now().UnixNano())
	child := exec.Command(wine, exe, "-test.run=^TestAStartUpRefusalReachesTheEventLog$")
	child.Env = append(os.Environ(), "NRI_HCN_PORTMAP_EVENTLOG_CHILD="+msg, "WINEDEBUG=err+eventlog")
	out, err := child.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "err:eventlog:ReportEventW") || !strings.Contains(string(out), msg) {
		t.Fatalf("wine's event log did not get %q (%v):\n%s", msg, err, out)
	}
}
