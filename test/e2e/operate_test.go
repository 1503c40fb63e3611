package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/config"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/test/harness"
)

// scrape returns the metric samples (name{labels} -> value) of /metrics.
func scrape(t *testing.T, env *harness.Env) map[string]float64 {
	t.Helper()
	m, err := env.Metrics()
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// waitMetric waits until the metric sample reaches want.
func waitMetric(t *testing.T, env *harness.Env, sample string, want float64) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for scrape(t, env)[sample] != want {
		if time.Now().After(deadline) {
			t.Fatalf("%s never reached %v: %v", sample, want, scrape(t, env))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func health(t *testing.T, env *harness.Env) (int, map[string]string) {
	t.Helper()
	res, err := http.Get("http://" + env.AdminAddr + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var rep struct{ Checks map[string]string }
	b, _ := io.ReadAll(res.Body)
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatalf("healthz body %q: %v", b, err)
	}
	return res.StatusCode, rep.Checks
}

func TestHealthMetricsAndStatus(t *testing.T) {
	env, ctx := startEnv(t)
	if err := harness.Eventually(ctx, 15*time.Second, func() error {
		if code, checks := health(t, env); code != http.StatusOK {
			return fmt.Errorf("healthz %d: %v", code, checks)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if out, _, err := env.Command(ctx, "health"); err != nil || !strings.Contains(out, `"status": "ok"`) {
		t.Fatalf("health command: %q, %v", out, err)
	}

	// a known sequence: two mapped pods, one denied, one invalid, one stop
	a, b := pod("metrics-a", "8900:80"), pod("metrics-b", "8901:80")
	aNS, err := env.RunPod(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	bNS, err := env.RunPod(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.RunPod(ctx, pod("metrics-denied", "3389:3389")); err == nil {
		t.Fatal("RDP admitted")
	}
	if _, err := env.RunPod(ctx, pod("metrics-invalid", "8902:80/sctp")); err == nil {
		t.Fatal("SCTP admitted")
	}
	if err := env.StopPod(ctx, a, aNS); err != nil {
		t.Fatal(err)
	}
	wantNoEndpoint(t, ctx, env, a.ID)
	// a pod that starts while the runtime is away is repaired by the
	// Synchronize after the plugin reconnects
	env.StopNRI()
	missed := pod("metrics-missed", "8903:80")
	missedNS, err := env.AddPodSilently(ctx, missed)
	if err != nil {
		t.Fatal(err)
	}
	if err := harness.Eventually(ctx, 15*time.Second, func() error {
		code, checks := health(t, env)
		if code != http.StatusServiceUnavailable || !strings.Contains(checks["event source"], "not registered") {
			return fmt.Errorf("healthz %d %v, want 503 naming the event source", code, checks)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if up := scrape(t, env)["nri_hcn_portmap_event_source_up"]; up != 0 {
		t.Errorf("event_source_up %v while the plugin is not registered, want 0", up)
	}
	if err := env.StartNRI(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-env.Synced():
	case <-time.After(30 * time.Second):
		t.Fatal("plugin did not reconnect")
	}
	env.NRI.BlockPluginSync().Unblock()
	wantEndpoint(t, ctx, env, missed.ID, missedNS, []hcn.PortMappingPolicy{tcp(8903, 80, "", 1)})

	want := map[string]float64{
		`nri_hcn_portmap_operations_total{kind="start",result="ok"}`:      2,
		`nri_hcn_portmap_operations_total{kind="start",result="denied"}`:  1,
		`nri_hcn_portmap_operations_total{kind="start",result="invalid"}`: 1,
		// a's stop, and a stop and a remove for each failed pod (containerd tears them down)
		`nri_hcn_portmap_operations_total{kind="stop",result="ok"}`:              5,
		`nri_hcn_portmap_event_source_up`:                                        1,
		`nri_hcn_portmap_start_to_mapped_seconds_count{path="nri"}`:              2, // a and b; missed was built by a resync
		`nri_hcn_portmap_endpoints_managed`:                                      2, // b and missed
		`nri_hcn_portmap_event_source_reconnects_total{source="nri"}`:            1,
		`nri_hcn_portmap_reconcile_runs_total{trigger="synchronize"}`:            2,
		`nri_hcn_portmap_reconcile_repairs_total{action="created"}`:              1,
		`nri_hcn_portmap_hcn_call_duration_seconds_count{call="CreateEndpoint"}`: 3,
	}
	if err := harness.Eventually(ctx, 15*time.Second, func() error {
		got := scrape(t, env)
		var wrong []string
		for k, v := range want {
			if got[k] != v {
				wrong = append(wrong, fmt.Sprintf("%s = %v, want %v", k, got[k], v))
			}
		}
		if harness.Sum(got, "nri_hcn_portmap_workqueue_adds_total") < 5 || harness.Sum(got, "nri_hcn_portmap_pods_failing") != 0 {
			wrong = append(wrong, fmt.Sprintf("workqueue adds %v (want one per sync at least), pods failing %v (want 0: the failed pods are gone)",
				harness.Sum(got, "nri_hcn_portmap_workqueue_adds_total"), harness.Sum(got, "nri_hcn_portmap_pods_failing")))
		}
		if len(wrong) > 0 {
			return fmt.Errorf("metrics:\n%s", strings.Join(wrong, "\n"))
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	// status: pod names from containerd, state from HCN, and an orphan:
	// an endpoint of ours for a sandbox containerd never had (one a run
	// before a reboot left; a sandbox deleted from containerd now is
	// followed beside NRI by its /containers/delete, issue 55)
	nets, err := env.SimClient.ListNetworks(ctx)
	if err != nil || len(nets) != 1 {
		t.Fatalf("networks %+v, %v: want the plugin's one", nets, err)
	}
	orphan := sandboxID("metrics-orphan")
	if _, err := env.SimClient.CreateEndpoint(ctx, hcn.EndpointSpec{Name: config.EndpointPrefix + orphan, NetworkID: nets[0].ID}); err != nil {
		t.Fatal(err)
	}
	entries, err := env.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	st, _, err := env.SimClient.State(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != len(st.Endpoints) {
		t.Fatalf("status lists %d endpoints, HCN holds %d", len(entries), len(st.Endpoints))
	}
	byID := map[string]hcn.Endpoint{}
	for _, ep := range st.Endpoints {
		byID[ep.ID] = ep
	}
	for _, e := range entries {
		ep, ok := byID[e.Endpoint]
		if !ok || ep.Namespace != e.NetNS || ep.IPAddress != e.IPAddress || !hcn.SamePolicies(ep.PortMappings, e.Mappings) {
			t.Errorf("status entry %+v does not match HCN %+v", e, ep)
		}
		switch e.Sandbox {
		case b.ID:
			if e.Pod != "metrics-b" || e.Namespace != "default" || e.State != "attached" || e.NetNS != bNS {
				t.Errorf("b: %+v", e)
			}
		case orphan:
			if e.State != "orphaned" {
				t.Errorf("orphan: %+v, want orphaned", e)
			}
		}
	}
	table, err := env.StatusTable(ctx)
	if err != nil || !strings.Contains(table, "metrics-b") || !strings.Contains(table, "*:8901->80/tcp") || !strings.Contains(table, "orphaned") {
		t.Errorf("status table:\n%s", table)
	}
}

func TestReload(t *testing.T) {
	env, ctx := startEnv(t)
	keep := pod("reload-keep", "8950:80")
	keepNS, err := env.RunPod(ctx, keep)
	if err != nil {
		t.Fatal(err)
	}
	write := func(body string) {
		if err := os.WriteFile(env.ConfigPath, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	original, err := os.ReadFile(env.ConfigPath)
	if err != nil {
		t.Fatal(err)
	}
	// a valid file: 8950-8959 are now denied, for new pods only
	admission := func(keys string) string { // the [admission] section gains keys
		return strings.Replace(string(original), "[admission]\n", "[admission]\n"+keys, 1)
	}
	write(admission("deny = [\"8950-8959\"]\n"))
	out, _, err := env.Command(ctx, "reload")
	if err != nil || out != "reloaded: admission policy applied to every mapping not in place (mappings in place stay)\n" {
		t.Fatalf("reload: %q, %v", out, err)
	}
	if _, err := env.RunPod(ctx, pod("reload-denied", "8951:80")); err == nil || !strings.Contains(err.Error(), `admission.deny[0] = "8950-8959"`) {
		t.Fatalf("after reload, 8951: %v", err)
	}
	if _, err := env.RunPod(ctx, pod("reload-rdp", "3389:3389")); err != nil {
		t.Fatalf("the new deny list replaced the default one, RDP should pass now: %v", err)
	}
	wantEndpoint(t, ctx, env, keep.ID, keepNS, []hcn.PortMappingPolicy{tcp(8950, 80, "", 1)}) // admitted before: kept

	// an invalid file is rejected and the policy in force stays
	bad := admission("deny = [\"8950-8959\"]\nhost_port_range = [\"1-65535\"]\n")
	write(bad)
	badLine := strings.Count(bad[:strings.Index(bad, "host_port_range")], "\n") + 1
	out, stderr, err := env.Command(ctx, "reload")
	// said once, on stderr: rejected by the plugin, why, and that the old
	// configuration stays
	wantErr := fmt.Sprintf("nri-hcn-portmap: reload rejected by the plugin (400 Bad Request); the configuration in force stays: "+
		"config: %s:%d: unknown key \"admission.host_port_range\": did you mean admission.host_port_ranges?\n", env.ConfigPath, badLine)
	if err == nil || out != "" || stderr != wantErr {
		t.Fatalf("reload of a bad file: stdout %q, stderr %q, %v\nwant stderr %q", out, stderr, err, wantErr)
	}
	if _, err := env.RunPod(ctx, pod("reload-still-denied", "8952:80")); err == nil || !strings.Contains(err.Error(), "8950-8959") {
		t.Fatalf("after a rejected reload, 8952: %v", err)
	}

	// SIGHUP reloads too
	write(string(original))
	if err := sighup(env.Plugin.PID()); err != nil {
		t.Fatal(err)
	}
	if err := harness.Eventually(ctx, 15*time.Second, func() error {
		_, err := env.RunPod(ctx, pod(fmt.Sprintf("reload-hup-%d", time.Now().UnixNano()), "8953:80"))
		return err
	}); err != nil {
		t.Fatalf("after SIGHUP with the original file, 8953: %v", err)
	}
	rejected := scrape(t, env)[`nri_hcn_portmap_config_reloads_total{result="rejected"}`]
	applied := scrape(t, env)[`nri_hcn_portmap_config_reloads_total{result="applied"}`]
	if rejected != 1 || applied != 2 {
		t.Errorf("reload metrics: applied %v, rejected %v; want 2 and 1", applied, rejected)
	}
}

func TestCleanupRemovesEveryEndpoint(t *testing.T) {
	env, ctx := startEnv(t)
	for i := range 3 {
		if _, err := env.RunPod(ctx, pod(fmt.Sprintf("cleanup-%d", i), fmt.Sprintf("%d:80", 8960+i))); err != nil {
			t.Fatal(err)
		}
	}
	// while the plugin runs, cleanup refuses (the plugin would rebuild the
	// endpoints of running pods) and removes nothing
	out, stderr, err := env.Command(ctx, "cleanup")
	if err == nil || !strings.Contains(stderr, "the plugin still runs (it answers at "+env.AdminAddr+")") {
		t.Fatalf("cleanup with the plugin running: %q %q %v, want it refused", out, stderr, err)
	}
	if st, _, err := env.SimClient.State(ctx); err != nil || len(st.Endpoints) != 3 {
		t.Fatalf("a refused cleanup changed HCN: %+v %v", st.Endpoints, err)
	}
	env.Plugin.Stop()
	out, _, err = env.Command(context.WithoutCancel(ctx), "cleanup")
	if err != nil || !strings.Contains(out, "3 of 3 endpoints removed") {
		t.Fatalf("cleanup: %q, %v", out, err)
	}
	st, _, err := env.SimClient.State(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Endpoints) != 0 {
		t.Fatalf("HCN holds %+v", st.Endpoints)
	}
}

// Liveness asks neither HNS nor containerd: a node whose HNS network is
// missing is not ready, but the plugin is not restarted for it.
func TestLivenessIsNotReadiness(t *testing.T) {
	env, ctx := newEnv(t, `[hcn]
network = "not-here"
create_network = false
`)
	if err := env.StartPluginEvents(ctx); err != nil {
		t.Fatal(err)
	}
	out, _, err := env.Command(ctx, "health", "--live")
	if err != nil || !strings.Contains(out, `"status": "ok"`) || !strings.Contains(out, `"event sources": "ok"`) {
		t.Fatalf("health --live: %q, %v", out, err)
	}
	out, stderr, err := env.Command(ctx, "health")
	if err == nil || !strings.Contains(out, `"status": "unhealthy"`) || !strings.Contains(out, `network \"not-here\": not found`) ||
		strings.Contains(out, "not found: not found") || stderr != "nri-hcn-portmap: health: 503 Service Unavailable\n" {
		t.Fatalf("health: %q %q %v, want unhealthy for the missing network", out, stderr, err)
	}
}

// status without containerd: a warning that says so, the endpoints from
// HNS all the same, in a stable order.
func TestStatusWithoutContainerd(t *testing.T) {
	env, ctx := startEnv(t)
	for _, name := range []string{"zeta", "alpha"} {
		if _, err := env.RunPod(ctx, pod(name, map[string]string{"zeta": "8961:80", "alpha": "8962:80"}[name])); err != nil {
			t.Fatal(err)
		}
	}
	out, stderr, err := env.Command(ctx, "status", "--containerd-address", "/nonexistent/containerd.sock", "-o", "json")
	if err != nil {
		t.Fatalf("status: %v %s", err, stderr)
	}
	if want := "nri-hcn-portmap: warning: containerd does not answer at /nonexistent/containerd.sock; pod names and orphans are not shown\n"; stderr != want {
		t.Fatalf("stderr %q, want %q", stderr, want)
	}
	if !strings.Contains(out, sandboxID("zeta")) || !strings.Contains(out, sandboxID("alpha")) {
		t.Fatalf("the endpoints are not listed: %s", out)
	}
	// with containerd: sorted by namespace and pod, whatever the GUIDs
	entries, err := env.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 2 || entries[0].Pod != "alpha" || entries[1].Pod != "zeta" {
		t.Fatalf("rows %+v, want alpha then zeta", entries)
	}
}

// Issue 36: a plugin that stops says why, and whoever waits on it is told
// how it ended. Asked to stop (SIGTERM), it logs the signal and its last
// line and exits 0, its endpoints answering until then; killed, the
// harness says so (a wait on /metrics names the signal and the end of
// the log), so a process gone is never mistaken for a slow one.
func TestAPluginThatStopsSaysWhy(t *testing.T) {
	env, ctx := startEnv(t)
	if _, err := env.Metrics(); err != nil {
		t.Fatalf("the plugin answers at once after registering: %v", err)
	}
	env.Plugin.Stop()
	if got := env.Plugin.Exited(); got != "exit status 0" {
		t.Fatalf("stopped: %q, want exit status 0", got)
	}
	log, err := os.ReadFile(env.Plugin.Log)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{`msg="asked to stop" signal=terminated`, `msg="nri-hcn-portmap stopped" reason="signal terminated"`} {
		if !strings.Contains(string(log), line) {
			t.Errorf("the log does not say %s:\n%s", line, env.Plugin.Tail(10))
		}
	}
	if err := env.StartPlugin(ctx); err != nil {
		t.Fatal(err)
	}
	env.Plugin.Kill()
	if _, err := env.Metrics(); err == nil || !strings.Contains(err.Error(), "signal: killed") {
		t.Fatalf("/metrics of a killed plugin: %v, want the harness to say it was killed", err)
	}
}
