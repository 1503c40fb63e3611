package hcn_test

import (
	"context"
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
