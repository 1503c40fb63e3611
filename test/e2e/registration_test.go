package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/request"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/test/harness"
)

// launchedConf is the plugin's configuration as containerd hands it over:
// everything the plugin needs, since a launched plugin gets no flags.
func launchedConf(env *harness.Env) string {
	return fmt.Sprintf(`[plugin]
resync_interval = "0s"
[containerd]
address = %q
[admin]
listen = %q
[hcn]
backend = "simulated"
simulator_address = %q
network = "nat"
create_network = true
subnet = "172.30.0.0/16"
gateway = "172.30.0.1"
`, env.CtrAddress, env.AdminAddr, env.SimAddress)
}

// onePID waits until exactly one process runs path, other than old.
func onePID(t *testing.T, ctx context.Context, path string, old int) int {
	t.Helper()
	var pids []int
	err := harness.Eventually(ctx, 20*time.Second, func() error {
		pids = harness.PIDsOf(path)
		if len(pids) != 1 || pids[0] == old {
			return fmt.Errorf("processes of %s: %v (the old one: %d)", path, pids, old)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return pids[0]
}

// TestLaunchedByContainerdNRI: our binary in containerd's NRI plugin_path
// with its conf in plugin_config_path. containerd launches it; it registers
// under containerd's name and index (10-hcn-portmap, not its own default
// 50-hcn-portmap), runs on the conf (its admin address, simulator and
// containerd come from there), answers Synchronize. A containerd restart ends
// the old process and launches a new one; a containerd killed outright
// leaves the plugin to notice and exit on its own; a bad conf is refused
// in Configure and containerd's log says why.
func TestLaunchedByContainerdNRI(t *testing.T) {
	env, ctx := newEnvWith(t, harness.Options{ContainerdNRI: true})
	bin := filepath.Join(env.NRIPluginDir, "10-hcn-portmap")
	if err := copyFile(pluginBin, bin); err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(env.NRIConfDir, "10-hcn-portmap.conf")
	if err := os.WriteFile(conf, []byte(launchedConf(env)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := env.RestartContainerd(ctx, nil); err != nil {
		t.Fatal(err)
	}
	first := onePID(t, ctx, bin, 0)
	waitSample(t, ctx, env, `nri_hcn_portmap_nri_registered{mode="launched",plugin="10-hcn-portmap"}`, 1)
	waitSample(t, ctx, env, `nri_hcn_portmap_reconcile_runs_total{trigger="synchronize"}`, 1)
	// its admin address is the conf's (a launched plugin gets no flags)
	if code, checks := health(t, env); code != 200 || checks["event source"] != "ok" {
		t.Fatalf("/healthz of the launched plugin: %d %v", code, checks)
	}

	// containerd restarted: the old process is gone, a new one is launched
	if err := env.RestartContainerd(ctx, nil); err != nil {
		t.Fatal(err)
	}
	onePID(t, ctx, bin, first)
	waitSample(t, ctx, env, `nri_hcn_portmap_nri_registered{mode="launched",plugin="10-hcn-portmap"}`, 1)

	// containerd killed: nobody stops the plugin; it sees its connection
	// close and exits by itself
	env.Containerd.Kill()
	if err := harness.Eventually(ctx, 15*time.Second, func() error {
		if pids := harness.PIDsOf(bin); len(pids) != 0 {
			return fmt.Errorf("the launched plugin still runs after containerd died: %v", pids)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	// a bad conf: Configure fails, containerd's log names the file, the
	// key and the plugin
	if err := os.WriteFile(conf, []byte("[plugin]\nsorce = \"nri\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := env.StartContainerd(ctx); err != nil {
		t.Fatal(err)
	}
	want := `NRI configuration of 10-hcn-portmap (10-hcn-portmap.conf in the runtime's plugin_config_path):2: unknown key \"plugin.sorce\": did you mean plugin.source?`
	if err := harness.Eventually(ctx, 20*time.Second, func() error {
		if b, _ := os.ReadFile(env.Containerd.Log); !strings.Contains(string(b), want) {
			return fmt.Errorf("containerd's log does not say %s", want)
		}
		return nil
	}); err != nil {
		b, _ := os.ReadFile(env.Containerd.Log)
		var lines []string
		for _, l := range strings.Split(string(b), "\n") {
			if strings.Contains(l, "hcn-portmap") {
				lines = append(lines, l)
			}
		}
		t.Fatalf("%v; its lines about the plugin:\n%s\n--- its tail:\n%s", err, strings.Join(lines, "\n"), env.Containerd.Tail(25))
	}
}

// TestExternalAgainstContainerdNRI: the same binary started on its own
// against containerd's NRI socket registers under its configured name and
// index, and is synchronized.
func TestExternalAgainstContainerdNRI(t *testing.T) {
	env, ctx := newEnvWith(t, harness.Options{Config: eventsConfig, ContainerdNRI: true})
	args := append(env.PluginArgs("run"), "--source", "nri", "--nri-socket", env.CtrNRISocket)
	if err := env.StartProcess(ctx, "plugin", args...); err != nil {
		t.Fatal(err)
	}
	waitSample(t, ctx, env, `nri_hcn_portmap_nri_registered{mode="external",plugin="50-hcn-portmap"}`, 1)
	waitSample(t, ctx, env, `nri_hcn_portmap_reconcile_runs_total{trigger="synchronize"}`, 1)
	// containerd restarts: the external plugin reconnects by itself
	if err := env.RestartContainerd(ctx, nil); err != nil {
		t.Fatal(err)
	}
	waitSample(t, ctx, env, `nri_hcn_portmap_reconcile_runs_total{trigger="synchronize"}`, 2)
	waitSample(t, ctx, env, `nri_hcn_portmap_nri_registered{mode="external",plugin="50-hcn-portmap"}`, 1)
}

func copyFile(from, to string) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return os.WriteFile(to, b, 0o755)
}

// waitSample is waitMetric for a plugin that may not serve yet.
func waitSample(t *testing.T, ctx context.Context, env *harness.Env, sample string, want float64) {
	t.Helper()
	if err := env.WaitMetric(ctx, sample, want, 20*time.Second); err != nil {
		t.Fatal(err)
	}
}

// TestCRIPodReachesThePluginThroughContainerdNRI: a real pod, made through
// containerd's CRI (RunPodSandbox, StopPodSandbox, RemovePodSandbox; runc,
// a hostNetwork pod, a sandbox image built here), reaches the plugin
// through containerd's own NRI, the path real nodes use. On Linux the
// sandbox has no Windows namespace: the plugin records the skip and creates
// nothing.
func TestCRIPodReachesThePluginThroughContainerdNRI(t *testing.T) {
	if _, err := exec.LookPath("runc"); err != nil {
		t.Fatalf("runc is needed (apt-get install runc; .ci/run installs it): %v", err)
	}
	env, ctx := newEnvWith(t, harness.Options{Config: eventsConfig, ContainerdNRI: true})
	if err := env.ImportPauseImage(ctx); err != nil {
		t.Fatal(err)
	}
	args := append(env.PluginArgs("run"), "--source", "nri", "--nri-socket", env.CtrNRISocket)
	if err := env.StartProcess(ctx, "plugin", args...); err != nil {
		t.Fatal(err)
	}
	waitSample(t, ctx, env, `nri_hcn_portmap_nri_registered{mode="external",plugin="50-hcn-portmap"}`, 1)
	cri, closeCRI, err := env.CRI()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeCRI)
	cfg := env.HostNetworkPod("cri-web", map[string]string{request.AnnotationPortMappings: "18600:80"})
	run, err := cri.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: cfg})
	if err != nil {
		t.Fatalf("CRI RunPodSandbox: %v\n%s", err, env.Containerd.Tail(30))
	}
	t.Cleanup(func() { // a failed test leaves no running pod behind
		_, _ = cri.StopPodSandbox(context.WithoutCancel(ctx), &runtimeapi.StopPodSandboxRequest{PodSandboxId: run.PodSandboxId})
		_, _ = cri.RemovePodSandbox(context.WithoutCancel(ctx), &runtimeapi.RemovePodSandboxRequest{PodSandboxId: run.PodSandboxId})
	})
	waitSample(t, ctx, env, `nri_hcn_portmap_skipped_total{reason="no-windows-namespace"}`, 1)
	waitSample(t, ctx, env, `nri_hcn_portmap_operations_total{kind="start",result="ok"}`, 1)
	if _, err := cri.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: run.PodSandboxId}); err != nil {
		t.Fatalf("CRI StopPodSandbox: %v", err)
	}
	waitSample(t, ctx, env, `nri_hcn_portmap_operations_total{kind="stop",result="ok"}`, 1)
	if _, err := cri.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: run.PodSandboxId}); err != nil {
		t.Fatalf("CRI RemovePodSandbox: %v", err)
	}
	st, _, err := env.SimClient.State(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// nothing for the pod; the plugin's own network is made ready at start-up
	if len(st.Endpoints) != 0 || len(st.Networks) > 1 || (len(st.Networks) == 1 && st.Networks[0].Name != "nat") {
		t.Errorf("a pod without a Windows namespace left HNS with %+v", st)
	}
}
