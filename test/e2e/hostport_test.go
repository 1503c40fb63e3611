package e2e

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/status"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/test/harness"
)

// hostPortConfig is the default mapping sources (annotations and hostPort)
// with no periodic resync.
const hostPortConfig = `[plugin]
resync_interval = "0s"
` + harness.NetworkConfig

// cniShape is how a pod's CNI endpoint maps a host port.
type cniShape int

const (
	cniRouted cniShape = iota // v2 PortMapping with LocalRoutedVip: works on L2Bridge
	cniV1NAT                  // v1 NAT policy: on L2Bridge it never listens (Windows-Containers 360)
)

// Issue 26, through real containerd, with NRI and with containerd's events
// as the source: a pod's hostPorts that its CNI's endpoint (in the pod's
// namespace, on an L2Bridge network) maps are left to the CNI and shown as
// the CNI's; the rest are ours; a CNI mapping known not to work is shown as
// such and not duplicated; a hostPort and an annotation that give one host
// port two container ports is an error naming both.
func TestHostPortsAndTheCNI(t *testing.T) {
	for _, source := range []string{"nri", "containerd"} {
		t.Run(source, func(t *testing.T) {
			env, ctx := newEnv(t, hostPortConfig)
			var err error
			if source == "nri" {
				err = env.StartPlugin(ctx, "--source", "nri")
			} else {
				err = env.StartPluginEvents(ctx)
			}
			if err != nil {
				t.Fatal(err)
			}
			bridge, err := env.SimClient.CreateNetwork(ctx, hcn.NetworkSpec{Name: "cbr0", Type: hcn.NetworkL2Bridge, Subnet: "10.246.0.0/24", Gateway: "10.246.0.1"})
			if err != nil {
				t.Fatal(err)
			}
			for i, tc := range []struct {
				name  string
				cni   map[int]cniShape // which of the pod's two host ports the CNI maps, and how
				ours  []int            // which we map
				works bool             // the CNI's mappings work
			}{
				{"the CNI maps all", map[int]cniShape{0: cniRouted, 1: cniRouted}, nil, true},
				{"the CNI maps some", map[int]cniShape{0: cniRouted}, []int{1}, true},
				{"the CNI maps none", nil, []int{0, 1}, true},
				{"the CNI maps one in a shape known to fail", map[int]cniShape{0: cniV1NAT}, []int{1}, false},
			} {
				t.Run(tc.name, func(t *testing.T) {
					ports := []uint16{uint16(8710 + 10*i), uint16(8711 + 10*i)}
					p := pod(fmt.Sprintf("hostport-%s-%d", source, i), "")
					p.HostPorts = []*runtimeapi.PortMapping{hostPort(runtimeapi.Protocol_TCP, 80, int32(ports[0]), ""),
						hostPort(runtimeapi.Protocol_TCP, 81, int32(ports[1]), "")}
					guid, err := env.CreateSandbox(ctx, p)
					if err != nil {
						t.Fatal(err)
					}
					// the CNI's endpoint, made before the start (CNI ADD)
					spec := hcn.EndpointSpec{Name: "cbr0_" + p.ID, NetworkID: bridge.ID, DNS: hcn.DNS{ServerList: []string{"10.96.0.10"}}}
					for j, shape := range tc.cni {
						pol := hcn.PortMappingPolicy{Protocol: hcn.TCP, ExternalPort: ports[j], InternalPort: uint16(80 + j)}
						if shape == cniRouted {
							pol.Flags = hcn.NatFlagsLocalRoutedVip
							spec.PortMappings = append(spec.PortMappings, pol)
						} else {
							spec.NATPolicies = append(spec.NATPolicies, pol)
						}
					}
					cni, err := env.SimClient.CreateEndpoint(ctx, spec)
					if err == nil {
						err = env.SimClient.AddNamespaceEndpoint(ctx, guid, cni.ID)
					}
					if err != nil {
						t.Fatal(err)
					}
					startPod(t, ctx, env, source, p)
					var want []hcn.PortMappingPolicy
					for _, j := range tc.ours {
						want = append(want, tcp(ports[j], uint16(80+j), "", 1))
					}
					if len(want) > 0 {
						wantEndpoint(t, ctx, env, p.ID, guid, want)
					} else {
						wantNoEndpoint(t, ctx, env, p.ID)
					}
					// status says who maps the rest: the CNI's endpoint
					wantCNI(t, ctx, env, p.ID, cni.ID, len(tc.cni), tc.works)
					// each host port is mapped once in HNS
					st, _, err := env.SimClient.State(ctx)
					if err != nil {
						t.Fatal(err)
					}
					for _, port := range ports {
						n := 0
						for _, ep := range st.Endpoints {
							for _, q := range append(append([]hcn.PortMappingPolicy{}, ep.PortMappings...), ep.NATPolicies...) {
								if q.ExternalPort == port {
									n++
								}
							}
						}
						if n != 1 {
							t.Errorf("host port %d mapped %d times", port, n)
						}
					}
				})
			}
			t.Run("hostPort and annotation disagree", func(t *testing.T) {
				p := pod("disagree-"+source, "8790:81")
				p.HostPorts = []*runtimeapi.PortMapping{hostPort(runtimeapi.Protocol_TCP, 80, 8790, "")}
				if source == "nri" {
					_, err := env.RunPod(ctx, p)
					if err == nil || !strings.Contains(err.Error(), "8790:81/tcp") || !strings.Contains(err.Error(), "8790:80/tcp") {
						t.Fatalf("RunPodSandbox = %v, want an error naming both mappings", err)
					}
				} else {
					before := harness.Sum(scrape(t, env), `nri_hcn_portmap_operations_total{kind="event-start",result="invalid"}`)
					runSandbox(t, ctx, env, p)
					if err := env.WaitMetric(ctx, `nri_hcn_portmap_operations_total{kind="event-start",result="invalid"}`, before+1, 20*time.Second); err != nil {
						t.Fatal(err)
					}
				}
				wantNoEndpoint(t, ctx, env, p.ID)
			})
		})
	}
}

// Issue 26, decided: a CNI endpoint that appears after our start (a CNI
// ADD retried) finds the host port ours; HNS refuses a second mapping of it,
// so the CNI's endpoint comes without it, and ours keeps it: never two
// mappings of a port, and no flapping when the pod is synced again.
func TestCNIEndpointAfterOursLeavesOneMapping(t *testing.T) {
	env, ctx := newEnv(t, hostPortConfig)
	if err := env.StartPluginEvents(ctx); err != nil {
		t.Fatal(err)
	}
	bridge, err := env.SimClient.CreateNetwork(ctx, hcn.NetworkSpec{Name: "cbr0", Type: hcn.NetworkL2Bridge, Subnet: "10.247.0.0/24", Gateway: "10.247.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	p := pod("cni-late", "")
	p.HostPorts = []*runtimeapi.PortMapping{hostPort(runtimeapi.Protocol_TCP, 80, 8795, "")}
	guid := runSandbox(t, ctx, env, p)
	ours := wantEndpoint(t, ctx, env, p.ID, guid, []hcn.PortMappingPolicy{tcp(8795, 80, "", 1)})
	late := hcn.EndpointSpec{Name: "cbr0_" + p.ID, NetworkID: bridge.ID,
		PortMappings: []hcn.PortMappingPolicy{{Protocol: hcn.TCP, ExternalPort: 8795, InternalPort: 80, Flags: hcn.NatFlagsLocalRoutedVip}}}
	if _, err := env.SimClient.CreateEndpoint(ctx, late); !errors.Is(err, hcn.ErrPortInUse) {
		t.Fatalf("the CNI's late endpoint with our port: %v, want HNS to refuse it", err)
	}
	late.PortMappings = nil // the CNI's ADD, retried without the port
	cni, err := env.SimClient.CreateEndpoint(ctx, late)
	if err == nil {
		err = env.SimClient.AddNamespaceEndpoint(ctx, guid, cni.ID)
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := env.PublishStart(ctx, p.ID); err != nil { // synced again
		t.Fatal(err)
	}
	if err := harness.Consistently(ctx, time.Second, func() error {
		got := endpointOf(t, ctx, env, p.ID)
		if got == nil || got.Endpoint != ours.Endpoint {
			return fmt.Errorf("our endpoint changed: %+v, was %s", got, ours.Endpoint)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// startPod starts the pod through the source: the runtime's RunPodSandbox,
// or containerd's /tasks/start.
func startPod(t *testing.T, ctx context.Context, env *harness.Env, source string, p harness.Pod) {
	t.Helper()
	if source == "nri" {
		env.AddRuntimePod(p)
		if err := env.NRI.RunPodSandbox(ctx, harness.RunRequest(p)); err != nil {
			t.Fatalf("RunPodSandbox: %v", err)
		}
		return
	}
	if err := env.PublishStart(ctx, p.ID); err != nil {
		t.Fatal(err)
	}
}

// wantCNI waits until status shows n of the pod's host ports as mapped by
// the CNI's endpoint cni, working or not.
func wantCNI(t *testing.T, ctx context.Context, env *harness.Env, id, cni string, n int, works bool) {
	t.Helper()
	err := harness.Eventually(ctx, 15*time.Second, func() error {
		entries, err := env.Status(ctx)
		if err != nil {
			return err
		}
		var got []status.Entry
		for _, e := range entries {
			if e.Sandbox == id {
				got = append(got, e)
			}
		}
		var cniRows int
		for _, e := range got {
			for _, m := range e.CNI {
				if m.Endpoint != cni || m.Works != works {
					return fmt.Errorf("status %+v: the CNI's mapping %+v", got, m)
				}
				cniRows++
			}
		}
		if cniRows != n {
			return fmt.Errorf("status %+v: %d of the pod's ports shown as the CNI's, want %d", got, cniRows, n)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
