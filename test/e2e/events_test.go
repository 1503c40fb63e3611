package e2e

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/config"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn/hcnsim"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/test/harness"
)

// eventsConfig takes mappings from both sources and disables the periodic
// resync, so what these tests see is the work of the events themselves.
const eventsConfig = `[plugin]
mapping_sources = ["annotations", "cri"]
resync_interval = "0s"
` + harness.NetworkConfig

func startEventsEnv(t *testing.T, config string, pluginArgs ...string) (*harness.Env, context.Context) {
	t.Helper()
	env, ctx := newEnv(t, config)
	if err := env.StartPluginEvents(ctx, pluginArgs...); err != nil {
		t.Fatal(err)
	}
	return env, ctx
}

// runSandbox creates the sandbox and publishes its task start, as
// containerd does on Windows.
func runSandbox(t *testing.T, ctx context.Context, env *harness.Env, p harness.Pod) hcn.GUID {
	t.Helper()
	guid, err := env.CreateSandbox(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if err := env.PublishStart(ctx, p.ID); err != nil {
		t.Fatal(err)
	}
	return guid
}

func hostPort(proto runtimeapi.Protocol, container, host int32, ip string) *runtimeapi.PortMapping {
	return &runtimeapi.PortMapping{Protocol: proto, ContainerPort: container, HostPort: host, HostIp: ip}
}

func TestContainerdEventSource(t *testing.T) {
	env, ctx := startEventsEnv(t, eventsConfig)

	start := func(t *testing.T, p harness.Pod) hcn.GUID {
		t.Helper()
		return runSandbox(t, ctx, env, p)
	}

	cri := pod("cri", "")
	cri.HostPorts = []*runtimeapi.PortMapping{hostPort(runtimeapi.Protocol_TCP, 80, 8180, ""), hostPort(runtimeapi.Protocol_UDP, 53, 8153, "10.0.0.4"),
		hostPort(runtimeapi.Protocol_TCP, 81, 0, "")}
	ann := pod("annotated", "8181:80")
	both := pod("both", "8182:80")
	both.HostPorts = []*runtimeapi.PortMapping{hostPort(runtimeapi.Protocol_TCP, 80, 8182, "")}
	clash := pod("clash", "8183:80")
	clash.HostPorts = []*runtimeapi.PortMapping{hostPort(runtimeapi.Protocol_TCP, 81, 8183, "")}

	criNS, annNS, bothNS := start(t, cri), start(t, ann), start(t, both)
	start(t, clash)

	t.Run("hostPort from CRI", func(t *testing.T) {
		wantEndpoint(t, ctx, env, cri.ID, criNS, []hcn.PortMappingPolicy{tcp(8180, 80, "", 1),
			{Protocol: hcn.UDP, ExternalPort: 8153, InternalPort: 53, VIP: "10.0.0.4", Flags: 1}})
	})
	t.Run("mapping from the annotation", func(t *testing.T) {
		wantEndpoint(t, ctx, env, ann.ID, annNS, []hcn.PortMappingPolicy{tcp(8181, 80, "", 1)})
	})
	t.Run("same mapping from both counts once", func(t *testing.T) {
		wantEndpoint(t, ctx, env, both.ID, bothNS, []hcn.PortMappingPolicy{tcp(8182, 80, "", 1)})
	})
	t.Run("conflicting sources: error, no endpoint", func(t *testing.T) {
		if err := env.WaitMetric(ctx, `nri_hcn_portmap_operations_total{kind="event-start",result="invalid"}`, 1, 20*time.Second); err != nil {
			t.Fatal(err)
		}
		if ep := endpointOf(t, ctx, env, clash.ID); ep != nil {
			t.Fatalf("conflicting pod got %+v", ep)
		}
	})
	t.Run("tasks/exit removes the endpoint", func(t *testing.T) {
		if err := env.PublishExit(ctx, cri.ID); err != nil {
			t.Fatal(err)
		}
		wantNoEndpoint(t, ctx, env, cri.ID)
		// what follows for the same sandbox is a quiet no-op
		if err := env.SimClient.DeleteNamespace(ctx, criNS); err != nil {
			t.Fatal(err)
		}
		if err := env.PublishTaskDelete(ctx, cri.ID); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("tasks/delete after the namespace is gone removes the endpoint", func(t *testing.T) {
		if err := env.SimClient.DeleteNamespace(ctx, annNS); err != nil { // containerd beat us to it
			t.Fatal(err)
		}
		if err := env.PublishTaskDelete(ctx, ann.ID); err != nil {
			t.Fatal(err)
		}
		wantNoEndpoint(t, ctx, env, ann.ID)
	})
	t.Run("containers/delete removes anything left", func(t *testing.T) {
		if err := env.DeleteSandbox(ctx, both.ID); err != nil {
			t.Fatal(err)
		}
		if err := env.PublishContainerDelete(ctx, both.ID); err != nil {
			t.Fatal(err)
		}
		wantNoEndpoint(t, ctx, env, both.ID)
	})
	t.Run("stop before start is seen", func(t *testing.T) {
		const starts = `nri_hcn_portmap_operations_total{kind="event-start"`
		before := harness.Sum(scrape(t, env), starts)
		late := pod("late", "8184:80")
		guid, err := env.CreateSandbox(ctx, late)
		if err != nil {
			t.Fatal(err)
		}
		// the pod started and stopped before the plugin handled its start:
		// the namespace is gone and the exit arrives first
		if err := env.SimClient.DeleteNamespace(ctx, guid); err != nil {
			t.Fatal(err)
		}
		if err := env.PublishExit(ctx, late.ID); err != nil {
			t.Fatal(err)
		}
		if err := env.PublishStart(ctx, late.ID); err != nil {
			t.Fatal(err)
		}
		if err := env.WaitMetric(ctx, starts, before+1, 20*time.Second); err != nil { // the late start was handled
			t.Fatal(err)
		}
		// and one whose container is already gone when its start is handled
		gone := pod("gone", "8185:80")
		if _, err := env.CreateSandbox(ctx, gone); err != nil {
			t.Fatal(err)
		}
		if err := env.DeleteSandbox(ctx, gone.ID); err != nil {
			t.Fatal(err)
		}
		if err := env.PublishStart(ctx, gone.ID); err != nil {
			t.Fatal(err)
		}
		// a pod after them still works, so nothing is stuck
		next := pod("next", "8186:80")
		nextNS := start(t, next)
		wantEndpoint(t, ctx, env, next.ID, nextNS, []hcn.PortMappingPolicy{tcp(8186, 80, "", 1)})
		for _, id := range []string{late.ID, gone.ID} {
			if ep := endpointOf(t, ctx, env, id); ep != nil {
				t.Errorf("sandbox %s left endpoint %+v", id, ep)
			}
		}
		st, _, err := env.SimClient.State(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, ep := range st.Endpoints {
			if ep.Namespace == "" {
				t.Errorf("detached endpoint left behind: %+v", ep)
			}
		}
	})
	if !env.Plugin.Running() {
		t.Fatal("plugin exited")
	}
}

// TestContainerdOverLoopbackTCP: with containerd.address = tcp://127.0.0.1:port
// (a relay to containerd's socket, how the Windows build reaches containerd
// under wine) the event source and the lookups work as over the socket, and
// containerd restarting under the plugin is survived.
func TestContainerdOverLoopbackTCP(t *testing.T) {
	env, ctx := newEnvWith(t, harness.Options{Config: eventsConfig, ContainerdTCP: true})
	if err := env.StartPluginEvents(ctx, "--containerd-address", env.CtrTCP); err != nil {
		t.Fatal(err)
	}
	p := pod("tcp-web", "18490:80")
	guid := runSandbox(t, ctx, env, p)
	wantEndpoint(t, ctx, env, p.ID, guid, []hcn.PortMappingPolicy{tcp(18490, 80, "", 1)})
	if err := env.RestartContainerd(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if err := env.WaitSubscribed(ctx, 2, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := env.PublishExit(ctx, p.ID); err != nil {
		t.Fatal(err)
	}
	wantNoEndpoint(t, ctx, env, p.ID)
}

func TestEventsLostWhilePluginDownAreRepaired(t *testing.T) {
	env, ctx := startEventsEnv(t, eventsConfig)
	stopped, started := pod("stopped-while-down", "8281:80"), pod("started-while-down", "")
	started.HostPorts = []*runtimeapi.PortMapping{hostPort(runtimeapi.Protocol_TCP, 80, 8282, "")}
	stoppedNS, err := env.CreateSandbox(ctx, stopped)
	if err != nil {
		t.Fatal(err)
	}
	if err := env.PublishStart(ctx, stopped.ID); err != nil {
		t.Fatal(err)
	}
	wantEndpoint(t, ctx, env, stopped.ID, stoppedNS, []hcn.PortMappingPolicy{tcp(8281, 80, "", 1)})

	env.Plugin.Kill()
	if err := env.SimClient.DeleteNamespace(ctx, stoppedNS); err != nil {
		t.Fatal(err)
	}
	if err := env.DeleteSandbox(ctx, stopped.ID); err != nil {
		t.Fatal(err)
	}
	if err := env.PublishExit(ctx, stopped.ID); err != nil { // nobody listens
		t.Fatal(err)
	}
	startedNS, err := env.CreateSandbox(ctx, started)
	if err != nil {
		t.Fatal(err)
	}
	if err := env.PublishStart(ctx, started.ID); err != nil { // lost too
		t.Fatal(err)
	}
	if err := env.StartPluginEvents(ctx); err != nil {
		t.Fatal(err)
	}
	wantNoEndpoint(t, ctx, env, stopped.ID)
	wantEndpoint(t, ctx, env, started.ID, startedNS, []hcn.PortMappingPolicy{tcp(8282, 80, "", 1)})
	// both repairs were the post-subscribe resync's, not an event's
	m := scrape(t, env)
	if m[`nri_hcn_portmap_reconcile_repairs_total{action="created"}`] != 1 || m[`nri_hcn_portmap_reconcile_repairs_total{action="deleted"}`] != 1 {
		t.Fatalf("resync repairs: %v created, %v deleted; want 1 and 1", m[`nri_hcn_portmap_reconcile_repairs_total{action="created"}`],
			m[`nri_hcn_portmap_reconcile_repairs_total{action="deleted"}`])
	}
}

func TestContainerdRestartUnderPlugin(t *testing.T) {
	env, ctx := startEventsEnv(t, eventsConfig)
	gone, missed := pod("stops-during-restart", "8381:80"), pod("missed-start", "8382:80")
	goneNS, err := env.CreateSandbox(ctx, gone)
	if err != nil {
		t.Fatal(err)
	}
	if err := env.PublishStart(ctx, gone.ID); err != nil {
		t.Fatal(err)
	}
	wantEndpoint(t, ctx, env, gone.ID, goneNS, []hcn.PortMappingPolicy{tcp(8381, 80, "", 1)})
	// a start whose event never came
	missedNS, err := env.CreateSandbox(ctx, missed)
	if err != nil {
		t.Fatal(err)
	}
	if ep := endpointOf(t, ctx, env, missed.ID); ep != nil {
		t.Fatalf("endpoint without an event or a resync: %+v", ep)
	}

	err = env.RestartContainerd(ctx, func() error {
		return env.SimClient.DeleteNamespace(ctx, goneNS) // the pod went away meanwhile
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := env.WaitSubscribed(ctx, 2, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	wantNoEndpoint(t, ctx, env, gone.ID)
	wantEndpoint(t, ctx, env, missed.ID, missedNS, []hcn.PortMappingPolicy{tcp(8382, 80, "", 1)})

	// events flow again on the new subscription
	after := pod("after-restart", "8383:80")
	afterNS, err := env.CreateSandbox(ctx, after)
	if err != nil {
		t.Fatal(err)
	}
	if err := env.PublishStart(ctx, after.ID); err != nil {
		t.Fatal(err)
	}
	wantEndpoint(t, ctx, env, after.ID, afterNS, []hcn.PortMappingPolicy{tcp(8383, 80, "", 1)})
	if !env.Plugin.Running() {
		t.Fatal("plugin exited")
	}
}

func TestAutoPicksContainerdWithoutNRISocket(t *testing.T) {
	env, ctx := startEventsEnv(t, eventsConfig, "--source", "auto", "--nri-socket", "/nonexistent/nri.sock")
	if m := scrape(t, env); m[`nri_hcn_portmap_event_source_info{source="containerd"}`] != 1 || m[`nri_hcn_portmap_event_source_info{source="nri"}`] != 0 {
		t.Fatalf("event source chosen: %v", m)
	}
	p := pod("auto", "8481:80")
	guid, err := env.CreateSandbox(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if err := env.PublishStart(ctx, p.ID); err != nil {
		t.Fatal(err)
	}
	wantEndpoint(t, ctx, env, p.ID, guid, []hcn.PortMappingPolicy{tcp(8481, 80, "", 1)})
}

func TestPeriodicResyncRepairs(t *testing.T) {
	env, ctx := startEventsEnv(t, strings.Replace(eventsConfig, `resync_interval = "0s"`, `resync_interval = "300ms"`, 1))
	p := pod("no-event", "8581:80")
	guid, err := env.CreateSandbox(ctx, p) // no event at all
	if err != nil {
		t.Fatal(err)
	}
	wantEndpoint(t, ctx, env, p.ID, guid, []hcn.PortMappingPolicy{tcp(8581, 80, "", 1)})
	// an endpoint whose sandbox vanished without any event goes too
	if err := env.SimClient.DeleteNamespace(ctx, guid); err != nil {
		t.Fatal(err)
	}
	if err := env.DeleteSandbox(ctx, p.ID); err != nil {
		t.Fatal(err)
	}
	wantNoEndpoint(t, ctx, env, p.ID)
	if n := scrape(t, env)[`nri_hcn_portmap_reconcile_runs_total{trigger="periodic"}`]; n < 1 {
		t.Fatalf("periodic resyncs: %v", n)
	}
}

func TestNRISourceUsesCRIHostPorts(t *testing.T) {
	env, ctx := newEnv(t, eventsConfig)
	if err := env.StartPlugin(ctx, "--source", "nri"); err != nil {
		t.Fatal(err)
	}
	p := pod("nri-hostport", "")
	p.HostPorts = []*runtimeapi.PortMapping{hostPort(runtimeapi.Protocol_UDP, 53, 8653, "")}
	guid, err := env.RunPod(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	wantEndpoint(t, ctx, env, p.ID, guid, []hcn.PortMappingPolicy{{Protocol: hcn.UDP, ExternalPort: 8653, InternalPort: 53, Flags: 1}})
	clash := pod("nri-clash", "8654:80")
	clash.HostPorts = []*runtimeapi.PortMapping{hostPort(runtimeapi.Protocol_TCP, 81, 8654, "")}
	if _, err := env.RunPod(ctx, clash); err == nil || !strings.Contains(err.Error(), "disagree") {
		t.Fatalf("RunPodSandbox with disagreeing sources: %v", err)
	}

	// issue 10, item 8: the CNI mapped one of the hostPorts on its own
	// endpoint in the pod's namespace before RunPodSandbox; we map the rest
	cni := pod("nri-cni", "")
	cni.HostPorts = []*runtimeapi.PortMapping{hostPort(runtimeapi.Protocol_TCP, 80, 8655, ""), hostPort(runtimeapi.Protocol_TCP, 81, 8656, "")}
	guid, err = env.CreateSandbox(ctx, cni)
	if err != nil {
		t.Fatal(err)
	}
	bridge, err := env.SimClient.CreateNetwork(ctx, hcn.NetworkSpec{Name: "cbr0", Type: hcn.NetworkL2Bridge, Subnet: "10.245.0.0/24", Gateway: "10.245.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	own, err := env.SimClient.CreateEndpoint(ctx, hcn.EndpointSpec{Name: "cbr0_" + cni.ID, NetworkID: bridge.ID,
		PortMappings: []hcn.PortMappingPolicy{{Protocol: hcn.TCP, ExternalPort: 8655, InternalPort: 80}}, DNS: hcn.DNS{ServerList: []string{"10.96.0.10"}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := env.SimClient.AddNamespaceEndpoint(ctx, guid, own.ID); err != nil {
		t.Fatal(err)
	}
	if err := env.NRI.RunPodSandbox(ctx, harness.RunRequest(cni)); err != nil {
		t.Fatalf("RunPodSandbox with a hostPort the CNI mapped: %v", err)
	}
	wantEndpoint(t, ctx, env, cni.ID, guid, []hcn.PortMappingPolicy{tcp(8656, 81, "", 1)})

	// issue 10, item 1: the pod keeps the CNI's default route and its own
	// DNS (ours carries the pod's: HNS would fill in the node's); ours has
	// the default low-priority route behind it
	st, _, err := env.SimClient.State(ctx)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(st.Namespaces, func(n hcnsim.Namespace) bool { return n.ID == guid })
	if i < 0 {
		t.Fatalf("namespace %s gone", guid)
	}
	d := st.Namespaces[i].DefaultRoutes()
	if len(d) != 2 || d[0].NextHop != "10.245.0.1" || d[1].Metric != config.DefaultRouteMetric || d[1].NextHop != "172.30.0.1" {
		t.Errorf("the pod's default routes %v: want the CNI's first and ours at metric %d", d, config.DefaultRouteMetric)
	}
	if dns := st.Namespaces[i].DNSServers; len(dns) == 0 || slices.ContainsFunc(dns, func(s string) bool { return s != "10.96.0.10" }) {
		t.Errorf("the pod's DNS servers %v: want the pod's alone (10.96.0.10)", dns)
	}
}

// Issue 24, 5: the default configuration maps a pod on a stock containerd
// node: no Docker, so no nat network; the plugin creates it (NAT: HNS hands
// out its addresses, so the endpoint's address is one no CNI's IPAM gives
// away). Where HNS takes one NAT network only and another NAT network
// exists, the plugin uses that one. The pod asks by hostPort: the
// annotation obeys Pod Security (issue 31), which the default
// configuration, with no [kubernetes], cannot read, so an annotated pod is
// refused, the error naming the way out.
func TestDefaultConfigMapsAPodOnAFreshNode(t *testing.T) {
	for _, tc := range []struct {
		name     string
		rules    hcnsim.Rules
		existing string // a NAT network already on the node
		want     string // the network the endpoint goes on
	}{
		{"no network", hcnsim.Rules{}, "", "nat"},
		{"another NAT network, HNS takes a second", hcnsim.Rules{}, "winnat", "nat"},
		{"another NAT network, HNS takes one only", hcnsim.Rules{SecondNATRefused: true}, "winnat", "winnat"},
		{"HNS wants a NAT network's subnet (unverified)", hcnsim.Rules{NATNeedsSubnet: true}, "", "nat"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// defaults for everything else but the NetworkPolicy check, which
			// reads the API server a fresh node's plugin has not been given
			// (TestTheDefaultConfigMapsNoHostPortItCannotCheck)
			env, ctx := newEnv(t, "[plugin]\nresync_interval = \"0s\"\n[admission]\nnetwork_policy = \"off\"\n")
			if err := env.SimClient.SetRules(ctx, tc.rules); err != nil {
				t.Fatal(err)
			}
			if tc.existing != "" {
				if _, err := env.SimClient.CreateNetwork(ctx, hcn.NetworkSpec{Name: tc.existing, Type: hcn.NetworkNAT}); err != nil {
					t.Fatal(err)
				}
			}
			if err := env.StartPluginEvents(ctx); err != nil {
				t.Fatal(err)
			}
			p := pod("fresh-node", "")
			p.HostPorts = []*runtimeapi.PortMapping{hostPort(runtimeapi.Protocol_TCP, 80, 8690, "")}
			guid := runSandbox(t, ctx, env, p)
			wantEndpoint(t, ctx, env, p.ID, guid, []hcn.PortMappingPolicy{tcp(8690, 80, "", 1)})
			st, _, err := env.SimClient.State(ctx)
			if err != nil {
				t.Fatal(err)
			}
			var netName string
			for _, ep := range st.Endpoints {
				for _, n := range st.Networks {
					if n.ID == ep.NetworkID {
						netName = n.Name
					}
				}
			}
			if netName != tc.want {
				t.Fatalf("the endpoint is on network %q, want %q (networks %+v)", netName, tc.want, st.Networks)
			}
		})
	}
}

// Issue 52: the default configuration (no [kubernetes]) cannot read the
// NetworkPolicies that may isolate a pod, so it maps no host port: the pod
// starts, unmapped, and the plugin's status and metrics say why, naming
// the way out.
func TestTheDefaultConfigMapsNoHostPortItCannotCheck(t *testing.T) {
	env, ctx := newEnv(t, "[plugin]\nresync_interval = \"0s\"\n")
	must(t, env.StartPluginEvents(ctx))
	p := pod("fresh-node", "")
	p.HostPorts = []*runtimeapi.PortMapping{hostPort(runtimeapi.Protocol_TCP, 80, 8691, "")}
	runSandbox(t, ctx, env, p)
	waitMetric(t, env, `nri_hcn_portmap_pods_failing{reason="NetworkPolicyUnknown"}`, 1)
	wantNoEndpoint(t, ctx, env, p.ID)
	if log := env.Plugin.Tail(200); !strings.Contains(log, "kubernetes.enabled = false") || !strings.Contains(log, `admission.network_policy = \"off\"`) {
		t.Errorf("the plugin's log does not name the way out:\n%s", log)
	}
}

// Issue 30, 6: hcn.network naming a network the plugin may not use (an
// L2Bridge network without hcn.allow_cni_network) stops it at start, with
// an error naming hcn.network and the way out, instead of running (healthy)
// while every pod fails.
func TestANetworkThePluginMayNotUseStopsItAtStart(t *testing.T) {
	for _, create := range []bool{true, false} {
		t.Run(fmt.Sprint("create_network=", create), func(t *testing.T) {
			env, ctx := newEnv(t, fmt.Sprintf("[hcn]\nnetwork = \"cbr0\"\ncreate_network = %v\n", create))
			if _, err := env.SimClient.CreateNetwork(ctx, hcn.NetworkSpec{Name: "cbr0", Type: hcn.NetworkL2Bridge, Subnet: "10.246.0.0/24", Gateway: "10.246.0.1"}); err != nil {
				t.Fatal(err)
			}
			cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			_, stderr, err := env.Command(cctx, "run", "--source", "containerd")
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != 1 || cctx.Err() != nil {
				t.Fatalf("run: %v (%v): want exit 1 at start\n%s", err, cctx.Err(), stderr)
			}
			for _, want := range []string{`hcn.network = "cbr0" cannot be used`, "L2Bridge, not NAT", "hcn.allow_cni_network = true"} {
				if !strings.Contains(stderr, want) {
					t.Errorf("stderr does not say %q:\n%s", want, stderr)
				}
			}
		})
	}
}
