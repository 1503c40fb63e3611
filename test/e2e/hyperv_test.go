package e2e

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/config"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/test/harness"
)

// Issue 10, item 2, on containerd events (the Windows path): the plugin
// cannot fail the pod, so a Hyper-V pod with host ports gets no endpoint,
// a warning and its own operations result; the next pod is served.
func TestHyperVPodThroughEvents(t *testing.T) {
	env, ctx := startEventsEnv(t, limitsConfig)
	hv := pod("hv", ports(9601, 9601))
	hv.HyperV = true
	refusedThenNextServed(t, ctx, env, hv, "hyperv", 9611)
}

// Issue 57: with ncproxy, a Hyper-V pod is mapped when the shim has ncproxy
// ask the plugin's NodeNetworkService for its network, before the
// sandbox's task exists; its VM gets the CNI's adapter, then ours; the
// task's start (NRI, or containerd's event) keeps what was built; a
// process-isolated pod asking its port is told who holds it; the teardown
// takes the adapters out and frees the port.
func TestAHyperVPodIsMappedThroughNCProxy(t *testing.T) {
	for _, path := range []string{"nri", "events"} {
		t.Run(path, func(t *testing.T) {
			env, ctx := newEnv(t, "")
			ncp, err := harness.StartNCProxy(env.SimClient)
			must(t, err)
			t.Cleanup(ncp.Close)
			svc, err := harness.FreeLoopbackAddr()
			must(t, err)
			cfg := harness.DefaultConfig + "[hyperv]\nnode_network_service = \"" + svc + "\"\nncproxy = \"" + ncp.Addr + "\"\n"
			must(t, os.WriteFile(env.ConfigPath, []byte(cfg), 0o644))
			if path == "nri" {
				must(t, env.StartPlugin(ctx))
			} else {
				must(t, env.StartPluginEvents(ctx))
			}

			hv := pod("hv-"+path, "9701:80")
			hv.HyperV = true
			guid, err := env.CreateSandbox(ctx, hv) // the task is not created yet
			must(t, err)
			bridge, err := env.SimClient.CreateNetwork(ctx, hcn.NetworkSpec{Name: "cbr0", Type: hcn.NetworkL2Bridge, Subnet: "10.247.0.0/24", Gateway: "10.247.0.1"})
			must(t, err)
			cni, err := env.SimClient.CreateEndpoint(ctx, hcn.EndpointSpec{Name: "cbr0_" + hv.ID, NetworkID: bridge.ID})
			must(t, err)
			must(t, env.SimClient.AddNamespaceEndpoint(ctx, guid, cni.ID))

			// the shim's NewTask: ncproxy asks the plugin for the pod's network
			must(t, ncp.ConfigureNetworking(ctx, svc, hv.ID, true))
			ours := config.EndpointPrefix + hv.ID
			if got := ncp.NICs(hv.ID); !slices.Equal(got, []string{cni.Name, ours}) {
				t.Fatalf("the VM's adapters %v, want the CNI's, then ours", got)
			}
			wantEndpoint(t, ctx, env, hv.ID, guid, []hcn.PortMappingPolicy{tcp(9701, 80, "", 1)})

			// the task starts
			if path == "nri" {
				must(t, env.NRI.RunPodSandbox(ctx, harness.RunRequest(hv)))
			} else {
				must(t, env.PublishStart(ctx, hv.ID))
				waitMetric(t, env, `nri_hcn_portmap_operations_total{kind="event-start",result="ok"}`, 1)
			}
			_, ops, err := env.SimClient.State(ctx)
			must(t, err)
			if n := ops["CreateEndpoint"]; n != 2 { // the CNI's and ours
				t.Fatalf("HNS was asked for %d endpoints, want the CNI's and ours once", n)
			}

			// a process-isolated pod asking the same port
			other := pod("proc-"+path, "9701:80")
			if path == "nri" {
				if _, err := env.RunPod(ctx, other); err == nil || !strings.Contains(err.Error(), "default/"+hv.Name) {
					t.Fatalf("a process-isolated pod asking the Hyper-V pod's port: %v, want a conflict naming default/%s", err, hv.Name)
				}
				waitMetric(t, env, `nri_hcn_portmap_operations_total{kind="start",result="conflict"}`, 1)
			} else {
				runSandbox(t, ctx, env, other)
				waitMetric(t, env, `nri_hcn_portmap_operations_total{kind="event-start",result="conflict"}`, 1)
			}
			wantNoEndpoint(t, ctx, env, other.ID) // and none over a window

			// the shim's teardown
			must(t, ncp.ConfigureNetworking(ctx, svc, hv.ID, false))
			if got := ncp.NICs(hv.ID); len(got) != 0 {
				t.Fatalf("after the teardown the VM has adapters %v", got)
			}
			wantNoEndpoint(t, ctx, env, hv.ID)
			next := pod("next-"+path, "9701:80")
			var nextNS hcn.GUID
			if path == "nri" {
				nextNS, err = env.RunPod(ctx, next)
				must(t, err)
			} else {
				nextNS = runSandbox(t, ctx, env, next)
			}
			wantEndpoint(t, ctx, env, next.ID, nextNS, []hcn.PortMappingPolicy{tcp(9701, 80, "", 1)})
		})
	}
}
