package e2e

import (
	"testing"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
)

// Issue 10, item 2, on containerd events (the Windows path): the plugin
// cannot fail the pod, so a Hyper-V pod with host ports gets no endpoint,
// a warning and its own operations result; the next pod is served.
func TestHyperVPodThroughEvents(t *testing.T) {
	env, ctx := startEventsEnv(t, limitsConfig)
	hv := pod("hv", ports(9601, 9601))
	hv.HyperV = true
	runSandbox(t, ctx, env, hv)
	waitMetric(t, env, `nri_hcn_portmap_operations_total{kind="event-start",result="hyperv"}`, 1)
	next := pod("process", ports(9611, 9611))
	guid := runSandbox(t, ctx, env, next)
	wantEndpoint(t, ctx, env, next.ID, guid, []hcn.PortMappingPolicy{tcp(9611, 80, "", 1)})
	if ep := endpointOf(t, ctx, env, hv.ID); ep != nil {
		t.Fatalf("Hyper-V pod got %+v", ep)
	}
}
