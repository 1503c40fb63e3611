package e2e

import (
	"fmt"
	"testing"
	"time"

	apievents "github.com/containerd/containerd/api/events"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/containerd"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/test/harness"
)

// Events of another containerd namespace that carry a sandbox's ID are not
// the sandbox's: its endpoint stays (over a window, not one look).
func TestEventsOfOtherNamespacesAreIgnored(t *testing.T) {
	env, ctx := startEventsEnv(t, eventsConfig)
	p := pod("other-ns", "8781:80")
	guid, err := env.CreateSandbox(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if err := env.PublishStart(ctx, p.ID); err != nil {
		t.Fatal(err)
	}
	want := []hcn.PortMappingPolicy{tcp(8781, 80, "", 1)}
	wantEndpoint(t, ctx, env, p.ID, guid, want)
	for _, ev := range []struct {
		topic string
		body  any
	}{
		{containerd.TopicTaskExit, &apievents.TaskExit{ContainerID: p.ID, ID: p.ID}},
		{containerd.TopicTaskDelete, &apievents.TaskDelete{ContainerID: p.ID, ID: p.ID}},
		{containerd.TopicContainerDelete, &apievents.ContainerDelete{ID: p.ID}},
	} {
		if err := env.PublishIn(ctx, "moby", ev.topic, ev.body); err != nil {
			t.Fatal(err)
		}
	}
	err = harness.Consistently(ctx, time.Second, func() error {
		if ep := endpointOf(t, ctx, env, p.ID); ep == nil || ep.State != "attached" {
			t.Fatalf("an event of another namespace touched the endpoint: %+v", ep)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := harness.Sum(scrape(t, env), `nri_hcn_portmap_operations_total{kind="event-stop"`); n != 0 {
		t.Fatalf("%v stops handled", n)
	}
}

// A start and the exit of the same sandbox published back to back are
// handled in order (or merged, the stop winning): no endpoint is left, and
// a burst of such pods leaves nothing either, while a pod started after
// them is served.
func TestStartThenExitInOrder(t *testing.T) {
	env, ctx := startEventsEnv(t, eventsConfig)
	var ids []string
	for i := range 20 {
		p := pod(fmt.Sprintf("flash-%d", i), fmt.Sprintf("%d:80", 8800+i))
		if _, err := env.CreateSandbox(ctx, p); err != nil {
			t.Fatal(err)
		}
		if err := env.PublishStart(ctx, p.ID); err != nil {
			t.Fatal(err)
		}
		if err := env.PublishExit(ctx, p.ID); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, p.ID)
	}
	last := pod("after-flash", "8830:80")
	guid, err := env.CreateSandbox(ctx, last)
	if err != nil {
		t.Fatal(err)
	}
	if err := env.PublishStart(ctx, last.ID); err != nil {
		t.Fatal(err)
	}
	wantEndpoint(t, ctx, env, last.ID, guid, []hcn.PortMappingPolicy{tcp(8830, 80, "", 1)})
	for _, id := range ids {
		wantNoEndpoint(t, ctx, env, id)
	}
}
