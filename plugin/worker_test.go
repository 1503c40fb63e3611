package plugin

import (
	"slices"
	"testing"
	"time"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn/hcnsim"
)

// 1: after a sandbox's sync succeeds its retry delay starts over: a later
// failure waits the shortest delay, not the one the earlier failures grew.
func TestRetryDelayStartsOverAfterASuccess(t *testing.T) {
	lim := newDelays(time.Millisecond, time.Second)
	f := newFixture(t, withLimiter(lim))
	p := f.eventPod("p", "8080:80")
	if err := f.sim.InjectFault(hcnsim.Fault{Op: hcnsim.OpCreateEndpoint, Kind: "unavailable", Count: 3}); err != nil {
		t.Fatal(err)
	}
	if err := startedAndWait(t, f, p); err != nil {
		t.Fatal(err)
	}
	grown := []time.Duration{time.Millisecond, 2 * time.Millisecond, 4 * time.Millisecond}
	if got := lim.of("p"); !slices.Equal(got, grown) {
		t.Fatalf("retry delays %v, want %v", got, grown)
	}
	// later: the endpoint is detached behind the plugin's back, and the
	// repair's first attach fails once
	ep := f.endpoints("p")[0]
	if err := f.sim.RemoveNamespaceEndpoint(ctx, ep.Namespace, ep.ID); err != nil {
		t.Fatal(err)
	}
	if err := f.sim.InjectFault(hcnsim.Fault{Op: hcnsim.OpAddNamespaceEndpoint, Kind: "unavailable", Count: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.core.ReconcileAll(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the repair is retried and attaches", func() bool {
		eps := f.endpoints("p")
		return len(eps) == 1 && eps[0].Namespace != ""
	})
	if got := lim.of("p"); !slices.Equal(got, append(grown, time.Millisecond)) {
		t.Fatalf("retry delays %v: the failure after a success did not start over at %v", got, time.Millisecond)
	}
}
