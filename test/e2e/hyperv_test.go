package e2e

import (
	"testing"
	"time"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
)

// Issue 10, item 2, on containerd events (the Windows path): the plugin
// cannot fail the pod, so a Hyper-V pod with host ports gets no endpoint,
// a warning and its own operations result; the next pod is served.
func TestHyperVPodThroughEvents(t *testing.T) {
	env, ctx := startEventsEnv(t, limitsConfig)
	hv := pod("hv", ports(9601, 9601))
	hv.HyperV = true
	if _, err := env.CreateSandbox(ctx, hv); err != nil {
		t.Fatal(err)
	}
	if err := env.PublishStart(ctx, hv.ID); err != nil {
		t.Fatal(err)
	}
	const refused = `nri_hcn_portmap_operations_total{kind="event-start",result="hyperv"}`
	deadline := time.Now().Add(20 * time.Second)
	for scrape(t, env)[refused] != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("%s never reached 1: %v", refused, scrape(t, env))
		}
		time.Sleep(50 * time.Millisecond)
	}
	next := pod("process", ports(9611, 9611))
	guid, err := env.CreateSandbox(ctx, next)
	if err != nil {
		t.Fatal(err)
	}
	if err := env.PublishStart(ctx, next.ID); err != nil {
		t.Fatal(err)
	}
	wantEndpoint(t, ctx, env, next.ID, guid, []hcn.PortMappingPolicy{tcp(9611, 80, "", 1)})
	if ep := endpointOf(t, ctx, env, hv.ID); ep != nil {
		t.Fatalf("Hyper-V pod got %+v", ep)
	}
}
