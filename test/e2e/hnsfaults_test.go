package e2e

import (
	"strings"
	"testing"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/config"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
)

// Issue 10, item 5: HNS restarts and reboots, modelled by the simulator.

// After an HNS restart every endpoint is gone (calico 5164). The periodic
// resync notices and rebuilds every running pod's endpoint, and a pod
// stopped afterwards frees its port.
func TestHNSRestartConverges(t *testing.T) {
	env, ctx := startEventsEnv(t, strings.Replace(eventsConfig, `resync_interval = "0s"`, `resync_interval = "300ms"`, 1))
	a, b := pod("restart-a", "8711:80"), pod("restart-b", "8712:80,8713:81/udp")
	wantA := []hcn.PortMappingPolicy{tcp(8711, 80, "", 1)}
	wantB := []hcn.PortMappingPolicy{tcp(8712, 80, "", 1), {Protocol: hcn.UDP, ExternalPort: 8713, InternalPort: 81, Flags: 1}}
	guidA, err := env.CreateSandbox(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	guidB, err := env.CreateSandbox(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	before := wantEndpoint(t, ctx, env, a.ID, guidA, wantA)
	wantEndpoint(t, ctx, env, b.ID, guidB, wantB)

	if err := env.SimClient.RestartHNS(ctx); err != nil {
		t.Fatal(err)
	}
	if st, _, err := env.SimClient.State(ctx); err != nil || len(st.Endpoints) != 0 {
		t.Fatalf("after the restart: %d endpoints, %v", len(st.Endpoints), err)
	}
	after := wantEndpoint(t, ctx, env, a.ID, guidA, wantA)
	wantEndpoint(t, ctx, env, b.ID, guidB, wantB)
	if after.Endpoint == before.Endpoint {
		t.Fatalf("endpoint %s survived an HNS restart", after.Endpoint)
	}

	// the plugin's memory of the old endpoint does not keep a stopped
	// pod's port: the next pod gets it
	if err := env.SimClient.DeleteNamespace(ctx, guidA); err != nil {
		t.Fatal(err)
	}
	if err := env.DeleteSandbox(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	wantNoEndpoint(t, ctx, env, a.ID)
	c := pod("restart-c", "8711:80")
	guidC, err := env.CreateSandbox(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	wantEndpoint(t, ctx, env, c.ID, guidC, wantA)
}

// After a reboot an endpoint of ours can outlive its namespace and still
// hold its host port (docker/for-win 13965, service-fabric 389). Its
// sandbox is gone, so the plugin removes it (detaching fails: the
// namespace is gone; deleting works) and the port goes to the pod that
// asks for it.
func TestStaleEndpointAfterRebootFreesItsPort(t *testing.T) {
	env, ctx := newEnv(t, eventsConfig)
	nat, err := env.SimClient.CreateNetwork(ctx, hcn.NetworkSpec{Name: "nat", Type: hcn.NetworkNAT, Subnet: "172.30.0.0/16", Gateway: "172.30.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	gone := hcn.GUID("5A7E0000-0000-4000-8000-00000000B007")
	stale, err := env.SimClient.AddStaleEndpoint(ctx, hcn.EndpointSpec{Name: config.EndpointPrefix + "before-the-reboot", NetworkID: nat.ID,
		PortMappings: []hcn.PortMappingPolicy{tcp(8721, 80, "", 1)}}, gone)
	if err != nil {
		t.Fatal(err)
	}
	if err := env.StartPluginEvents(ctx); err != nil {
		t.Fatal(err)
	}
	p := pod("after-reboot", "8721:80")
	guid := runSandbox(t, ctx, env, p)
	wantEndpoint(t, ctx, env, p.ID, guid, []hcn.PortMappingPolicy{tcp(8721, 80, "", 1)})
	st, _, err := env.SimClient.State(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, ep := range st.Endpoints {
		if ep.ID == stale.ID {
			t.Fatalf("stale endpoint %s is still there: %+v", stale.ID, ep)
		}
	}
}
