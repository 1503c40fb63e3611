package plugin

import (
	"sync"
	"testing"
	"time"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn/hcnsim"
)

// TestOneSandboxsSyncsNeverOverlap races starts and stops of one pod: syncs of one
// sandbox never overlap, so HCN never ends with two endpoints or a port
// conflict error; and a stop is final, so once the races are over the
// sandbox (stopped at least once) has no endpoint.
func TestOneSandboxsSyncsNeverOverlap(t *testing.T) {
	f := newFixture(t)
	p := f.sandbox("race", "8080:80")
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for i := range 64 {
		wg.Go(func() {
			var err error
			if i%3 == 0 {
				_, err = f.stop(p)
			} else {
				_, err = f.start(p)
			}
			if err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := len(f.endpoints("race")); n != 0 {
		t.Errorf("%d endpoints for a stopped pod", n)
	}
}

// TestCloseLetsInFlightWorkFinish: a shutdown while HCN work is in flight
// waits for it; nothing half-built is left.
func TestCloseLetsInFlightWorkFinish(t *testing.T) {
	f := newFixture(t)
	f.core.opt.Deadline = 10 * time.Millisecond
	f.core.opt.FailOpen = true
	p := f.sandbox("inflight", "8080:80")
	f.sim.SetLatency(30 * time.Millisecond)
	if err := f.core.StartPod(ctx, p); err != nil {
		t.Fatal(err)
	}
	f.core.Close() // the service stops while create/attach are running
	st := f.sim.State()
	if len(st.Endpoints) != 1 || st.Endpoints[0].Namespace == "" {
		t.Fatalf("after Close HCN holds %+v, want the endpoint finished and attached", st.Endpoints)
	}
}

// Issue 15: a HostProcess pod gets about 5 s to stop; Close waits for work
// in flight at most the shutdown grace, then leaves it to the next start.
func TestCloseWaitsAtMostTheGrace(t *testing.T) {
	f := newFixture(t)
	f.core.opt.ShutdownGrace = 50 * time.Millisecond
	p := f.eventPod("slow", "8080:80")
	f.sim.SetOpLatency(hcnsim.OpCreateEndpoint, time.Hour) // HNS hangs
	f.started(p.ID)
	eventually(t, "the create is in flight", func() bool { return f.sim.Calls()[hcnsim.OpCreateEndpoint] == 1 })
	closed := make(chan struct{})
	go func() { f.core.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(time.Minute): // a guard, not a timing target: without the grace Close waits an hour
		t.Fatal("Close waited for the hung HNS call")
	}
}
