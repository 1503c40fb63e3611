package hcn_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn/hcnsim"
)

// Regression (load and faults, 8): the /healthz probe of HNS was counted in
// the HNS latency metrics, skewing the latency of the real work.
func TestHealthProbeIsNotObserved(t *testing.T) {
	var calls []string
	svc := hcn.Instrumented(hcnsim.New(), func(call string, _ time.Duration, _ error) { calls = append(calls, call) })
	mgr := hcn.NewManager(svc, hcn.ManagerConfig{CreateNetwork: true, Network: hcn.NetworkSpec{Name: "nat", Type: hcn.NetworkNAT}})
	if err := mgr.Health(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(calls) != 0 {
		t.Fatalf("the health probe was observed: %v", calls)
	}
	if _, err := mgr.EnsureNetwork(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(calls) == 0 {
		t.Fatal("real work was not observed")
	}
}

// A not-found answer is HNS answering (the plugin asks for what may be
// gone on purpose): counted as a call, not as a failed one; any other
// error is a failure (issue 47).
func TestANotFoundAnswerIsNotAFailedCall(t *testing.T) {
	type call struct {
		name   string
		failed error
	}
	var calls []call
	sim := hcnsim.New()
	svc := hcn.Instrumented(sim, func(name string, _ time.Duration, err error) { calls = append(calls, call{name, err}) })
	ctx := context.Background()
	if _, err := svc.GetNetworkByName(ctx, "nowhere"); !errors.Is(err, hcn.ErrNotFound) {
		t.Fatalf("GetNetworkByName of no network = %v, want not found", err)
	}
	if len(calls) != 1 || calls[0].name != "GetNetworkByName" || calls[0].failed != nil {
		t.Fatalf("observed %+v, want one GetNetworkByName, not failed", calls)
	}
	if err := sim.InjectFault(hcnsim.Fault{Op: "CreateNetwork", Kind: "unavailable"}); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.CreateNetwork(ctx, hcn.NetworkSpec{Name: "nat", Type: hcn.NetworkNAT}); err == nil {
		t.Fatal("the injected fault did not fail the call")
	}
	if len(calls) != 2 || calls[1].failed == nil {
		t.Fatalf("observed %+v, want the second call failed", calls)
	}
}
