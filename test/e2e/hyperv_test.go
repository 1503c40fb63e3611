package e2e

import (
	"testing"
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
