package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/test/harness"
)

const limitsConfig = `[plugin]
mapping_sources = ["annotations", "cri"]
resync_interval = "0s"
max_mappings_per_pod = 3
max_annotation_bytes = 256
` + harness.NetworkConfig

// ports returns a compact annotation mapping host ports from..to.
func ports(from, to int) string {
	var parts []string
	for p := from; p <= to; p++ {
		parts = append(parts, fmt.Sprintf("%d:80", p))
	}
	return strings.Join(parts, ",")
}

// A pod over the configured limits fails under NRI with an error naming the
// pod, the count and the limit, and nothing is created; at the limit it
// works.
func TestLimitsThroughNRI(t *testing.T) {
	env, ctx := newEnv(t, limitsConfig)
	if err := env.StartPlugin(ctx); err != nil {
		t.Fatal(err)
	}
	crowded := pod("crowded", ports(9401, 9402))
	crowded.HostPorts = []*runtimeapi.PortMapping{hostPort(runtimeapi.Protocol_TCP, 80, 9403, ""), hostPort(runtimeapi.Protocol_TCP, 80, 9404, "")}
	tests := []struct {
		pod  string
		p    func() (hcn.GUID, error)
		want string
	}{
		{"entries", func() (hcn.GUID, error) { return env.RunPod(ctx, pod("entries", ports(9301, 9304))) },
			"pod default/entries: annotation hcn.nri.io/port-mappings: invalid pod request: 4 entries, more than the limit of 3 (plugin.max_mappings_per_pod)"},
		{"bytes", func() (hcn.GUID, error) { return env.RunPod(ctx, pod("bytes", "9311:80"+strings.Repeat(" ", 256))) },
			"pod default/bytes: annotation hcn.nri.io/port-mappings: invalid pod request: 263 bytes, more than the limit of 256 (plugin.max_annotation_bytes)"},
		{"crowded", func() (hcn.GUID, error) { return env.RunPod(ctx, crowded) },
			"pod default/crowded: invalid pod request: annotation and CRI hostPorts together: 4 host ports (a range counts its ports), more than the limit of 3"},
	}
	for _, tt := range tests {
		t.Run(tt.pod, func(t *testing.T) {
			_, err := tt.p()
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("RunPodSandbox = %v, want an error with %q", err, tt.want)
			}
			if ep := endpointOf(t, ctx, env, sandboxID(tt.pod)); ep != nil {
				t.Fatalf("rejected pod got %+v", ep)
			}
		})
	}
	t.Run("at the limit", func(t *testing.T) {
		p := pod("three", ports(9321, 9323))
		guid, err := env.RunPod(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		wantEndpoint(t, ctx, env, p.ID, guid, []hcn.PortMappingPolicy{tcp(9321, 80, "", 1), tcp(9322, 80, "", 1), tcp(9323, 80, "", 1)})
	})
}

// On containerd events the plugin cannot fail the pod: an over-limit pod
// gets no endpoint and is counted as an invalid request, like any rejected
// pod, and the next pod is served.
func TestLimitsThroughEvents(t *testing.T) {
	env, ctx := startEventsEnv(t, limitsConfig)
	refusedThenNextServed(t, ctx, env, pod("over", ports(9501, 9504)), "invalid", 9511)
}

// refusedThenNextServed runs refused through containerd's events: it is
// counted with result and gets no endpoint, and a next pod mapping port
// gets its endpoint.
func refusedThenNextServed(t *testing.T, ctx context.Context, env *harness.Env, refused harness.Pod, result string, port uint16) {
	t.Helper()
	runSandbox(t, ctx, env, refused)
	waitMetric(t, env, `nri_hcn_portmap_operations_total{kind="event-start",result="`+result+`"}`, 1)
	next := pod("next-"+refused.Name, ports(int(port), int(port)))
	guid := runSandbox(t, ctx, env, next)
	wantEndpoint(t, ctx, env, next.ID, guid, []hcn.PortMappingPolicy{tcp(port, 80, "", 1)})
	if ep := endpointOf(t, ctx, env, refused.ID); ep != nil {
		t.Fatalf("refused pod %s got %+v", refused.Name, ep)
	}
}
