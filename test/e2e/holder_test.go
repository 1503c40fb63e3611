package e2e

import (
	"testing"
	"time"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn/hcnsim"
)

// Regression: the event stream breaks (containerd restarts); before the
// plugin resubscribes, pod A is removed and its successor B, asking for A's
// host port, starts. The resync after resubscribing works on A and B at
// once, and B finds A's removal under way (HNS slow to delete). B must get
// its endpoint within seconds by itself: there is no periodic resync here.
func TestSuccessorGetsItsPredecessorsPortAfterContainerdRestart(t *testing.T) {
	env, ctx := startEventsEnv(t, eventsConfig)
	a := pod("predecessor", "8680:80")
	aNS := runSandbox(t, ctx, env, a)
	wantEndpoint(t, ctx, env, a.ID, aNS, []hcn.PortMappingPolicy{tcp(8680, 80, "", 1)})
	if err := env.SimClient.SetOpLatency(ctx, hcnsim.OpDeleteEndpoint, 500*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if err := env.RestartContainerd(ctx, nil); err != nil {
		t.Fatal(err)
	}
	// the plugin waits out its resubscribe backoff (at least 400 ms): what
	// happens now reaches it only through the resync
	if err := env.SimClient.DeleteNamespace(ctx, aNS); err != nil {
		t.Fatal(err)
	}
	if err := env.DeleteSandbox(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	b := pod("successor", "8680:80")
	bNS := runSandbox(t, ctx, env, b)
	if err := env.WaitSubscribed(ctx, 2, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	wantEndpoint(t, ctx, env, b.ID, bNS, []hcn.PortMappingPolicy{tcp(8680, 80, "", 1)})
	wantNoEndpoint(t, ctx, env, a.ID)
}
