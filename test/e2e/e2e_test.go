// End-to-end tests with real components: a containerd v2.4.2 daemon, the NRI
// runtime side (nri/pkg/adaptation), the plugin binary as its own process,
// and the HNS simulator process in place of HNS. They need root (containerd)
// and the containerd binary (`make containerd`); without them they fail,
// they do not skip.
package e2e

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn/hcnsim"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/request"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/status"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/test/harness"
)

var pluginBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "hcnpm-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if pluginBin, err = harness.BuildPlugin(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func sandboxID(name string) string {
	h := sha256.Sum256([]byte(name))
	return hex.EncodeToString(h[:])
}

func pod(name, annotation string) harness.Pod {
	p := harness.Pod{ID: sandboxID(name), Name: name, Namespace: "default", UID: "uid-" + name, DNS: harness.ClusterDNS("default")}
	if annotation != "" {
		p.Annotations = map[string]string{request.AnnotationPortMappings: annotation}
	}
	return p
}

// newEnv starts containerd, the simulator and the NRI runtime side, and
// shows their logs when the test fails.
func newEnv(t *testing.T, config string) (*harness.Env, context.Context) {
	t.Helper()
	return newEnvWith(t, harness.Options{Config: config})
}

// newEnvWith is newEnv with more options.
func newEnvWith(t *testing.T, o harness.Options) (*harness.Env, context.Context) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	o.PluginBin = pluginBin
	env, err := harness.Start(ctx, o)
	if err != nil {
		t.Fatalf("starting the environment: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, p := range []*harness.Process{env.Plugin, env.Sim, env.Containerd} {
				if p != nil {
					t.Logf("--- %s log (tail; %s) ---\n%s", p.Name, cmp.Or(p.Exited(), "running"), p.Tail(40))
				}
			}
		}
		env.Close()
	})
	return env, ctx
}

// startEnv is newEnv with the plugin on NRI.
func startEnv(t *testing.T) (*harness.Env, context.Context) {
	t.Helper()
	env, ctx := newEnv(t, "")
	if err := env.StartPlugin(ctx); err != nil {
		t.Fatal(err)
	}
	return env, ctx
}

func endpointOf(t *testing.T, ctx context.Context, env *harness.Env, id string) *status.Entry {
	t.Helper()
	entries, err := env.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var found *status.Entry
	for i := range entries {
		if entries[i].Sandbox == id && entries[i].Endpoint != "-" { // "-": a row of what the CNI maps, no endpoint of ours
			if found != nil {
				t.Fatalf("two endpoints for sandbox %s: %+v", id, entries)
			}
			found = &entries[i]
		}
	}
	return found
}

func wantEndpoint(t *testing.T, ctx context.Context, env *harness.Env, id string, netns hcn.GUID, want []hcn.PortMappingPolicy) *status.Entry {
	t.Helper()
	var got *status.Entry
	err := harness.Eventually(ctx, 15*time.Second, func() error {
		got = endpointOf(t, ctx, env, id)
		switch {
		case got == nil:
			return fmt.Errorf("no endpoint for sandbox %s", id)
		case got.NetNS != netns || got.State != "attached":
			return fmt.Errorf("endpoint %+v not attached to %s", got, netns)
		case !hcn.SamePolicies(got.Mappings, want):
			return fmt.Errorf("endpoint mappings %v, want %v", got.Mappings, want)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// wantNoEndpoint waits until the sandbox has no endpoint, then checks that
// it stays so for a while (a late create or a reconcile would show).
func wantNoEndpoint(t *testing.T, ctx context.Context, env *harness.Env, id string) {
	t.Helper()
	none := func() error {
		if ep := endpointOf(t, ctx, env, id); ep != nil {
			return fmt.Errorf("sandbox %s has endpoint %+v", id, ep)
		}
		return nil
	}
	if err := harness.Eventually(ctx, 15*time.Second, none); err != nil {
		t.Fatal(err)
	}
	if err := harness.Consistently(ctx, 300*time.Millisecond, none); err != nil {
		t.Fatal(err)
	}
}

func tcp(host, cont uint16, vip string, flags hcn.NatFlags) hcn.PortMappingPolicy {
	return hcn.PortMappingPolicy{Protocol: hcn.TCP, ExternalPort: host, InternalPort: cont, VIP: vip, Flags: flags}
}

func TestPodLifecycle(t *testing.T) {
	env, ctx := startEnv(t)

	t.Run("mapped pod gets an attached endpoint, once", func(t *testing.T) {
		p := pod("web", "8080:80, 10.0.0.4:8443:443/tcp, [fd00::4]:9090:90, 5353:53/UDP")
		guid, err := env.RunPod(ctx, p)
		if err != nil {
			t.Fatalf("RunPodSandbox: %v", err)
		}
		want := []hcn.PortMappingPolicy{tcp(8080, 80, "", 1), tcp(8443, 443, "10.0.0.4", 1), tcp(9090, 90, "fd00::4", 3),
			{Protocol: hcn.UDP, ExternalPort: 5353, InternalPort: 53, Flags: 1}}
		first := wantEndpoint(t, ctx, env, p.ID, guid, want)
		if first.IPAddress == "" {
			t.Error("endpoint got no IP address from the network")
		}
		// a repeated RunPodSandbox changes nothing
		if err := env.NRI.RunPodSandbox(ctx, apiRun(p)); err != nil {
			t.Fatal(err)
		}
		if again := wantEndpoint(t, ctx, env, p.ID, guid, want); again.Endpoint != first.Endpoint {
			t.Errorf("second RunPodSandbox replaced endpoint %s with %s", first.Endpoint, again.Endpoint)
		}
		table, err := env.StatusTable(ctx)
		if err != nil || !strings.Contains(table, first.Endpoint) || !strings.Contains(table, "10.0.0.4:8443->443/tcp") {
			t.Errorf("status table:\n%s (%v)", table, err)
		}
		// stop removes the endpoint; remove after stop is a quiet success
		if err := env.StopPod(ctx, p, guid); err != nil {
			t.Fatalf("StopPodSandbox: %v", err)
		}
		wantNoEndpoint(t, ctx, env, p.ID)
		if err := env.RemovePod(ctx, p); err != nil {
			t.Fatalf("RemovePodSandbox: %v", err)
		}
	})

	t.Run("JSON list annotation", func(t *testing.T) {
		p := pod("json", `[{"containerPort":80,"hostPort":8181,"protocol":"TCP","hostIP":"10.0.0.5"}]`)
		guid, err := env.RunPod(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		wantEndpoint(t, ctx, env, p.ID, guid, []hcn.PortMappingPolicy{tcp(8181, 80, "10.0.0.5", 1)})
		// RemovePodSandbox alone (no stop seen) also cleans up
		if err := env.RemovePod(ctx, p); err != nil {
			t.Fatal(err)
		}
		wantNoEndpoint(t, ctx, env, p.ID)
	})

	t.Run("unmapped pod gets nothing", func(t *testing.T) {
		p := pod("plain", "")
		if _, err := env.RunPod(ctx, p); err != nil {
			t.Fatal(err)
		}
		if ep := endpointOf(t, ctx, env, p.ID); ep != nil {
			t.Fatalf("unmapped pod got %+v", ep)
		}
	})

	t.Run("bad annotation fails the pod with a clear error and leaves nothing", func(t *testing.T) {
		p := pod("bad", "8282:80, 8283:80/sctp")
		_, err := env.RunPod(ctx, p)
		if err == nil {
			t.Fatal("RunPodSandbox succeeded for a bad annotation")
		}
		for _, w := range []string{"default/bad", request.AnnotationPortMappings, `"8283:80/sctp"`, "SCTP is not supported by HNS"} {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("error %q does not mention %q", err, w)
			}
		}
		if ep := endpointOf(t, ctx, env, p.ID); ep != nil {
			t.Fatalf("rejected pod got %+v", ep)
		}
		st, _, err := env.SimClient.State(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, ep := range st.Endpoints {
			for _, m := range ep.PortMappings {
				if m.ExternalPort == 8282 {
					t.Fatalf("port 8282 of the rejected pod is mapped: %+v", ep)
				}
			}
		}
	})

	t.Run("sandbox without a Windows namespace is skipped", func(t *testing.T) {
		p := pod("linux", "8383:80")
		p.NoWindowsNamespace = true
		if _, err := env.RunPod(ctx, p); err != nil {
			t.Fatalf("RunPodSandbox: %v", err)
		}
		if ep := endpointOf(t, ctx, env, p.ID); ep != nil {
			t.Fatalf("pod without namespace got %+v", ep)
		}
	})

	// issue 10, item 2: the utility VM of a Hyper-V pod never sees an
	// endpoint added after it started
	hyperV := []struct {
		name, why string
		pod       func() harness.Pod
	}{
		{"runhcs options in the container record", "SandboxIsolation HYPERVISOR",
			func() harness.Pod { p := pod("hv-record", "8585:80"); p.HyperV = true; return p }},
		{"Hyper-V runtime handler", "runtime handler runhcs-wcow-hypervisor",
			func() harness.Pod {
				p := pod("hv-handler", "8586:80")
				p.RuntimeHandler = "runhcs-wcow-hypervisor"
				return p
			}},
	}
	for _, tt := range hyperV {
		t.Run("Hyper-V pod is refused: "+tt.name, func(t *testing.T) {
			p := tt.pod()
			_, err := env.RunPod(ctx, p)
			if err == nil {
				t.Fatal("RunPodSandbox succeeded for a Hyper-V pod with host ports")
			}
			for _, w := range []string{"default/" + p.Name, "Hyper-V isolated pod", tt.why, "portMappings"} {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
			if ep := endpointOf(t, ctx, env, p.ID); ep != nil {
				t.Fatalf("Hyper-V pod got %+v", ep)
			}
		})
	}
	t.Run("process-isolated handler is served", func(t *testing.T) {
		p := pod("process", "8587:80")
		p.RuntimeHandler = "runhcs-wcow-process"
		guid, err := env.RunPod(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		wantEndpoint(t, ctx, env, p.ID, guid, []hcn.PortMappingPolicy{tcp(8587, 80, "", 1)})
	})

	t.Run("host port held by another pod fails the second pod", func(t *testing.T) {
		a, b := pod("holder", "8484:80"), pod("taker", "8484:80")
		guid, err := env.RunPod(ctx, a)
		if err != nil {
			t.Fatal(err)
		}
		_, err = env.RunPod(ctx, b)
		if err == nil || !strings.Contains(err.Error(), "*:8484->80/tcp is already held by pod default/holder") {
			t.Fatalf("second pod on a held port: %v", err)
		}
		if ep := endpointOf(t, ctx, env, b.ID); ep != nil {
			t.Fatalf("second pod got %+v", ep)
		}
		wantEndpoint(t, ctx, env, a.ID, guid, []hcn.PortMappingPolicy{tcp(8484, 80, "", 1)})
	})

	// issue 56: the plugin, its own process, reads the node's sockets
	t.Run("a host port a program of the node holds fails the pod naming the program", func(t *testing.T) {
		l, err := net.Listen("tcp", ":8488")
		if err != nil {
			t.Fatal(err)
		}
		u, err := net.ListenPacket("udp4", "0.0.0.0:8489")
		if err != nil {
			t.Fatal(err)
		}
		defer u.Close()
		me := filepath.Base(os.Args[0])[:min(15, len(filepath.Base(os.Args[0])))] // Linux's comm: 15 bytes
		for _, tc := range []struct{ annotation, says string }{
			{"8488:80", fmt.Sprintf("*:8488->80/tcp is held by the node's program %s (PID %d) listening on [::]:8488/tcp", me, os.Getpid())},
			{"8489:53/udp", fmt.Sprintf("*:8489->53/udp is held by the node's program %s (PID %d) bound to 0.0.0.0:8489/udp", me, os.Getpid())},
		} {
			p := pod("squatted-"+strings.NewReplacer(":", "-", "/", "-").Replace(tc.annotation), tc.annotation)
			if _, err := env.RunPod(ctx, p); err == nil || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("a pod asking %s, which this test holds: %v; want it refused saying %q", tc.annotation, err, tc.says)
			}
			if ep := endpointOf(t, ctx, env, p.ID); ep != nil {
				t.Fatalf("the refused pod got %+v", ep)
			}
		}
		l.Close() // the program lets the port go: the port is the pods' again
		p := pod("after", "8488:80")
		guid, err := env.RunPod(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		wantEndpoint(t, ctx, env, p.ID, guid, []hcn.PortMappingPolicy{tcp(8488, 80, "", 1)})
	})

	// issue 56: a block of ports (RTP, TURN, game servers) in one entry
	t.Run("a 1000-port UDP range is mapped port by port, said as one, and leaves nothing", func(t *testing.T) {
		p := pod("rtp", "20000-20999:20000-20999/udp")
		guid, err := env.RunPod(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		var want []hcn.PortMappingPolicy
		for port := uint16(20000); port <= 20999; port++ {
			want = append(want, hcn.PortMappingPolicy{Protocol: hcn.UDP, ExternalPort: port, InternalPort: port, Flags: 1})
		}
		wantEndpoint(t, ctx, env, p.ID, guid, want)
		if table, err := env.StatusTable(ctx); err != nil || !strings.Contains(table, "*:20000-20999->20000-20999/udp") {
			t.Errorf("status table:\n%s (%v): want the range said as one", table, err)
		}
		if err := env.StopPod(ctx, p, guid); err != nil {
			t.Fatal(err)
		}
		wantNoEndpoint(t, ctx, env, p.ID)
		if err := env.RemovePod(ctx, p); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("overlapping ranges: the second pod is told who holds the first port they share", func(t *testing.T) {
		a, b := pod("rtp-a", "21000-21099:21000-21099/udp"), pod("rtp-b", "21050-21149:31050-31149/udp")
		guid, err := env.RunPod(ctx, a)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := env.RunPod(ctx, b); err == nil || !strings.Contains(err.Error(), "*:21050->31050/udp is already held by pod default/rtp-a") {
			t.Fatalf("a range over a held one: %v; want it refused naming 21050 and rtp-a", err)
		}
		if ep := endpointOf(t, ctx, env, b.ID); ep != nil {
			t.Fatalf("the second pod got %+v", ep)
		}
		if err := env.StopPod(ctx, a, guid); err != nil {
			t.Fatal(err)
		}
	})

	if !env.Plugin.Running() {
		t.Fatalf("plugin exited:\n%s", env.Plugin.Tail(30))
	}
}

func TestPluginRestartConverges(t *testing.T) {
	env, ctx := startEnv(t)
	keep, gone, late := pod("keep", "9001:80"), pod("gone", "9002:80"), pod("late", "9003:80")
	keepNS, err := env.RunPod(ctx, keep)
	if err != nil {
		t.Fatal(err)
	}
	goneNS, err := env.RunPod(ctx, gone)
	if err != nil {
		t.Fatal(err)
	}
	before := wantEndpoint(t, ctx, env, keep.ID, keepNS, []hcn.PortMappingPolicy{tcp(9001, 80, "", 1)})
	wantEndpoint(t, ctx, env, gone.ID, goneNS, []hcn.PortMappingPolicy{tcp(9002, 80, "", 1)})

	env.Plugin.Kill() // a crash: no cleanup
	// while it is down: one pod stops and is removed, another starts
	if err := env.ForgetPod(ctx, gone, goneNS); err != nil {
		t.Fatal(err)
	}
	lateNS, err := env.AddPodSilently(ctx, late)
	if err != nil {
		t.Fatal(err)
	}
	if err := env.StartPlugin(ctx); err != nil {
		t.Fatal(err)
	}
	wantNoEndpoint(t, ctx, env, gone.ID)
	wantEndpoint(t, ctx, env, late.ID, lateNS, []hcn.PortMappingPolicy{tcp(9003, 80, "", 1)})
	after := wantEndpoint(t, ctx, env, keep.ID, keepNS, []hcn.PortMappingPolicy{tcp(9001, 80, "", 1)})
	if after.Endpoint != before.Endpoint {
		t.Errorf("restart replaced the running pod's endpoint %s with %s", before.Endpoint, after.Endpoint)
	}
}

func TestPluginReconnectsWhenRuntimeRestarts(t *testing.T) {
	env, ctx := startEnv(t)
	env.StopNRI() // the runtime goes away: the connection closes
	if err := env.StartNRI(); err != nil {
		t.Fatal(err)
	}
	// the same plugin process registers again on its own
	select {
	case <-waitSync(env):
	case <-time.After(30 * time.Second):
		t.Fatalf("plugin did not reconnect:\n%s", env.Plugin.Tail(30))
	}
	env.NRI.BlockPluginSync().Unblock()
	if !env.Plugin.Running() {
		t.Fatal("plugin exited instead of reconnecting")
	}
	p := pod("after-reconnect", "9101:80")
	guid, err := env.RunPod(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	wantEndpoint(t, ctx, env, p.ID, guid, []hcn.PortMappingPolicy{tcp(9101, 80, "", 1)})
}

// Issue 30, 2, end to end: the plugin restarted on an HNS that reads its
// endpoints back with less than was sent (no routes) or with more (the
// node's DNS filled in) adopts them: its Synchronize after the restart
// rebuilds nothing, and every endpoint keeps its ID (the host port never
// drops). Under each read-back variant.
func TestARestartRebuildsNothing(t *testing.T) {
	for _, rules := range []hcnsim.Rules{{}, {DropRoutes: true}, {NoDNSFill: true}, {DropRoutes: true, NoDNSFill: true}} {
		t.Run(rules.String(), func(t *testing.T) {
			env, ctx := newEnv(t, "")
			if err := env.SimClient.SetRules(ctx, rules); err != nil {
				t.Fatal(err)
			}
			if err := env.StartPlugin(ctx); err != nil {
				t.Fatal(err)
			}
			pods := []harness.Pod{pod("adopt-a", "9011:80"), pod("adopt-b", "9012:80")}
			pods[1].DNS = nil // a pod whose DNS is not known: HNS's fill-in is its
			ids := map[string]string{}
			for i, p := range pods {
				guid, err := env.RunPod(ctx, p)
				if err != nil {
					t.Fatal(err)
				}
				ids[p.ID] = wantEndpoint(t, ctx, env, p.ID, guid, []hcn.PortMappingPolicy{tcp(uint16(9011+i), 80, "", 1)}).Endpoint
			}
			env.Plugin.Kill()
			if err := env.StartPlugin(ctx); err != nil { // registers; the runtime side synchronizes
				t.Fatal(err)
			}
			waitMetric(t, env, `nri_hcn_portmap_reconcile_runs_total{trigger="synchronize"}`, 1)
			m := scrape(t, env)
			if n := m[`nri_hcn_portmap_reconcile_repairs_total{action="created"}`]; n != 0 {
				t.Errorf("the Synchronize after the restart rebuilt %v endpoints", n)
			}
			for _, p := range pods {
				if e := endpointOf(t, ctx, env, p.ID); e == nil || e.Endpoint != ids[p.ID] {
					t.Errorf("%s: endpoint %+v after the restart, want %s kept", p.ID, e, ids[p.ID])
				}
			}
		})
	}
}

// Issue 55: containerd keeps in memory which sandboxes it owes an NRI
// stop, so after it restarts a pod that lived through it is stopped with
// no NRI stop at all (containerd v2.4.2 internal/nri/nri.go). Beside NRI
// the plugin follows containerd's stop events: the sandbox's task exit
// frees its endpoint at once, with no resync (off here) and no NRI stop.
func TestAPodStoppedAfterAContainerdRestartIsFreedAtOnce(t *testing.T) {
	env, ctx := newEnv(t, eventsConfig) // resync off
	must(t, env.StartPlugin(ctx))
	p := pod("after-restart", "18707:80")
	ns, err := env.RunPod(ctx, p) // NRI's RunPodSandbox
	must(t, err)
	wantEndpoint(t, ctx, env, p.ID, ns, []hcn.PortMappingPolicy{tcp(18707, 80, "", 1)})
	must(t, env.WaitSubscribed(ctx, 1, 20*time.Second))
	must(t, env.RestartContainerd(ctx, nil))
	must(t, env.WaitSubscribed(ctx, 2, 20*time.Second)) // the stop events' subscription, taken up again
	if ep := endpointOf(t, ctx, env, p.ID); ep == nil {
		t.Fatal("the running pod's endpoint went with the restart")
	}
	must(t, env.PublishExit(ctx, p.ID)) // the sandbox's task exits; NRI says nothing
	wantNoEndpoint(t, ctx, env, p.ID)
}
