package e2e

import (
	"strings"
	"testing"

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
