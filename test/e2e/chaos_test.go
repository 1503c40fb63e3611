package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn/hcnsim"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/test/harness"
)

const chaosConfig = `[plugin]
resync_interval = "1s"

[hcn]
network = "nat"
create_network = true
network_type = "NAT"
subnet = "172.30.0.0/16"
gateway = "172.30.0.1"
call_timeout = "300ms"
retry_max = "1s"

[log]
level = "info"
` + harness.NoAPIServer

// chaosPod is a pod of the chaos run and what HCN should hold for it.
type chaosPod struct {
	pod  harness.Pod
	ns   hcn.GUID
	port int
}

// TestChaos churns pods through the containerd event path (the one stock
// containerd on Windows uses) while faults strike at random moments: the
// plugin killed, containerd restarted, HNS restarted (every endpoint gone),
// endpoints deleted behind the plugin's back, HNS calls hanging past their
// time limit, sandboxes vanishing without any event. Host ports are reused
// as pods come and go, so a stale claim shows as a pod without its mapping.
// At checkpoints and at the end HCN must equal what the live pods ask for:
// no leaked endpoint, no missing mapping, one network, and no goroutine
// growth. CHAOS_SEED replays a run; CHAOS_PODS sizes it (default 1000).
// It runs once per variant of the HNS rules nobody has verified on a real
// node (hcnsim.Rules): the full size under the default rules, a quarter
// under each other variant.
func TestChaos(t *testing.T) {
	// A fixed seed unless asked for another (CHAOS_SEED=random picks a new
	// one each run): a failure in CI is replayed with the seed it printed.
	// Timing still varies between runs; the seed fixes the sequence of pods
	// and faults.
	seed := uint64(1)
	switch s := os.Getenv("CHAOS_SEED"); s {
	case "":
	case "random":
		seed = uint64(time.Now().UnixNano())
	default:
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("CHAOS_SEED: %v", err)
		}
		seed = v
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("replay this run: CHAOS_SEED=%d go test -run TestChaos ./test/e2e/", seed)
		}
	})
	total := 1000
	if s := os.Getenv("CHAOS_PODS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			t.Fatalf("CHAOS_PODS: %v", err)
		}
		total = n
	}
	t.Logf("chaos seed %d, %d pods (replay: CHAOS_SEED=%d)", seed, total, seed)
	for i, rules := range hcnsim.AllRules() {
		n := total
		if i > 0 {
			n = max(total/4, 1)
		}
		t.Run(rules.String(), func(t *testing.T) { chaos(t, rules, seed, n) })
	}
}

func chaos(t *testing.T, rules hcnsim.Rules, seed uint64, total int) {
	rng := rand.New(rand.NewPCG(seed, 0x9e3779b9))
	env, ctx := newEnv(t, chaosConfig)
	ctx, cancel := context.WithTimeout(ctx, 4*time.Minute)
	defer cancel()
	if err := env.SimClient.SetRules(ctx, rules); err != nil {
		t.Fatal(err)
	}
	if err := env.StartPluginEvents(ctx); err != nil {
		t.Fatal(err)
	}
	live := map[string]*chaosPod{}
	held := map[int]bool{} // host ports of live pods
	const maxLive, firstPort, ports = 40, 9100, 60
	freePort := func() int {
		for {
			p := firstPort + rng.IntN(ports)
			if !held[p] {
				return p
			}
		}
	}
	randomLive := func() *chaosPod {
		ids := make([]string, 0, len(live))
		for id := range live {
			ids = append(ids, id)
		}
		slices.Sort(ids)
		if len(ids) == 0 {
			return nil
		}
		return live[ids[rng.IntN(len(ids))]]
	}
	forget := func(cp *chaosPod) {
		delete(live, cp.pod.ID)
		delete(held, cp.port)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	goroutines := func() float64 {
		m, err := env.Metrics()
		must(err)
		return m["go_goroutines"]
	}

	checkpoint := func(when string) {
		t.Helper()
		must(env.SimClient.SetLatency(ctx, 0))
		want := map[string]chaosPod{}
		for id, cp := range live {
			want[id] = *cp
		}
		err := harness.Eventually(ctx, 45*time.Second, func() error {
			if err := hcnEquals(ctx, env, want); err != nil {
				return err
			}
			// and the plugin's own state agrees: nothing it still believes in
			m, err := env.Metrics()
			if err != nil {
				return err
			}
			if n := m["nri_hcn_portmap_endpoints_managed"]; n != float64(len(want)) {
				return fmt.Errorf("the plugin believes it manages %v endpoints, %d pods are live", n, len(want))
			}
			return nil
		})
		if err != nil {
			t.Fatalf("%s (seed %d): HCN never matched the live pods: %v", when, seed, err)
		}
		// no pod was refused a port that no live pod held
		m, err := env.Metrics()
		must(err)
		if n := m[`nri_hcn_portmap_operations_total{kind="event-start",result="conflict"}`]; n != 0 {
			t.Fatalf("%s (seed %d): %v false host-port conflicts", when, seed, n)
		}
		t.Logf("%s: HCN matches %d live pods", when, len(want))
	}

	var baseline float64
	settle := func() { // goroutines of a freshly (re)started plugin, once idle
		checkpoint("settled")
		baseline = goroutines()
	}
	// noGrowth: once idle, the plugin is back to its goroutines of when it
	// settled (workers, clients, timers), not one more per pod or fault
	noGrowth := func(when string) {
		t.Helper()
		var now float64
		err := harness.Eventually(ctx, 10*time.Second, func() error {
			// connections kept alive to HNS and containerd (up to the cap of
			// 12 HNS calls, two goroutines each) and timers come and go; a
			// leak per pod or per fault is hundreds
			if now = goroutines(); now > baseline+50 {
				return fmt.Errorf("%v goroutines, %v when the plugin settled", now, baseline)
			}
			return nil
		})
		if err != nil {
			t.Fatalf("%s (seed %d): goroutine growth: %v", when, seed, err)
		}
		t.Logf("%s: %v goroutines (%v when the plugin settled)", when, now, baseline)
	}
	settle()

	faults := []string{"kill", "containerd", "hns-restart", "delete-endpoints", "hang", "vanish"}
	for i := range total {
		// a new pod on a host port no live pod holds
		port := freePort()
		p := pod(fmt.Sprintf("chaos-%d", i), fmt.Sprintf("%d:80", port))
		ns, err := env.CreateSandbox(ctx, p)
		must(err)
		must(env.PublishStart(ctx, p.ID))
		live[p.ID] = &chaosPod{pod: p, ns: ns, port: port}
		held[port] = true
		// pods go as they come: the runtime's stop order
		for len(live) > maxLive || (len(live) > 0 && rng.IntN(3) == 0) {
			cp := randomLive()
			must(env.PublishExit(ctx, cp.pod.ID))
			must(env.SimClient.DeleteNamespace(ctx, cp.ns))
			must(env.DeleteSandbox(ctx, cp.pod.ID))
			must(env.PublishContainerDelete(ctx, cp.pod.ID))
			forget(cp)
		}
		if i%50 == 49 {
			f := faults[rng.IntN(len(faults))]
			t.Logf("pod %d: fault %s", i, f)
			switch f {
			case "kill":
				checkpoint("before the kill")
				noGrowth("before the kill")
				env.Plugin.Kill()
				if cp := randomLive(); cp != nil { // a pod stops while the plugin is down
					must(env.SimClient.DeleteNamespace(ctx, cp.ns))
					must(env.DeleteSandbox(ctx, cp.pod.ID))
					forget(cp)
				}
				must(env.StartPluginEvents(ctx))
				settle() // a new process: a new goroutine baseline
			case "containerd":
				must(env.RestartContainerd(ctx, nil))
			case "hns-restart", "delete-endpoints":
				st, _, err := env.SimClient.State(ctx)
				must(err)
				for _, ep := range st.Endpoints {
					if f == "delete-endpoints" && rng.IntN(3) != 0 {
						continue
					}
					if ep.Namespace != "" {
						_ = env.SimClient.RemoveNamespaceEndpoint(ctx, ep.Namespace, ep.ID)
					}
					_ = env.SimClient.DeleteEndpoint(ctx, ep.ID)
				}
			case "hang":
				must(env.SimClient.SetLatency(ctx, 450*time.Millisecond)) // past the 300ms call timeout
				time.Sleep(time.Duration(500+rng.IntN(1000)) * time.Millisecond)
				must(env.SimClient.SetLatency(ctx, 0))
			case "vanish":
				if cp := randomLive(); cp != nil {
					must(env.SimClient.DeleteNamespace(ctx, cp.ns))
					must(env.DeleteSandbox(ctx, cp.pod.ID))
					forget(cp)
				}
			}
		}
		if i%250 == 249 {
			checkpoint(fmt.Sprintf("after %d pods", i+1))
		}
	}
	checkpoint("end")
	noGrowth("end")
	if !env.Plugin.Running() {
		t.Fatal("plugin exited")
	}
}

// hcnEquals compares HCN with what the live pods ask for: each has exactly
// one endpoint, attached to its namespace, mapping its port; nothing else
// of ours exists; one network.
func hcnEquals(ctx context.Context, env *harness.Env, want map[string]chaosPod) error {
	st, _, err := env.SimClient.State(ctx)
	if err != nil {
		return err
	}
	if len(st.Networks) > 1 || (len(want) > 0 && len(st.Networks) != 1) {
		return fmt.Errorf("%d networks", len(st.Networks))
	}
	got := map[string][]hcn.Endpoint{}
	for _, ep := range st.Endpoints {
		id, ok := strings.CutPrefix(ep.Name, "nri-hcn-portmap-")
		if !ok {
			continue
		}
		if _, wanted := want[id]; !wanted {
			return fmt.Errorf("leaked endpoint %s of sandbox %s", ep.ID, id)
		}
		got[id] = append(got[id], ep)
	}
	for id, cp := range want {
		eps := got[id]
		policy := []hcn.PortMappingPolicy{tcp(uint16(cp.port), 80, "", 1)}
		switch {
		case len(eps) != 1:
			return fmt.Errorf("pod %s has %d endpoints", cp.pod.Name, len(eps))
		case eps[0].Namespace != cp.ns:
			return fmt.Errorf("pod %s: endpoint in namespace %q, want %s", cp.pod.Name, eps[0].Namespace, cp.ns)
		case !hcn.SamePolicies(eps[0].PortMappings, policy):
			return fmt.Errorf("pod %s: mappings %v, want %v", cp.pod.Name, eps[0].PortMappings, policy)
		}
	}
	return nil
}
