package plugin

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn/hcnsim"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/request"
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
	f.sim.SetOpLatency(hcnsim.OpCreateEndpoint, 3*time.Second) // HNS is slow: far past the grace
	f.started(p.ID)
	eventually(t, "the create is in flight", func() bool { return f.sim.Calls()[hcnsim.OpCreateEndpoint] == 1 })
	closed := make(chan struct{})
	go func() { f.core.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(time.Minute): // a guard, not a timing target
		t.Fatal("Close did not return")
	}
	if eps := f.sim.State().Endpoints; len(eps) != 0 {
		t.Fatalf("Close returned after the slow create finished (HNS holds %+v): it waited past the grace", eps)
	}
	// the fixture's cleanup waits for the create to finish
}

// TestRandomFaultsConverge drives pods through random starts (the
// runtime's, and containerd events'), stops and removals while HCN fails at
// random steps (before or after taking effect), then lets one reconcile run
// without faults: HCN must then hold exactly the desired endpoints, no
// leaked one and no missing mapping. About half the pods stay live to the
// end (a stop is final, so only the others see stops); the test fails if no
// fault ever left HCN wrong before the final reconcile, or if no pod was
// live at the end.
func TestRandomFaultsConverge(t *testing.T) {
	kinds := []string{"internal", "unavailable", "not-found", "in-use"}
	diverged, liveChecked := 0, 0
	defer func() {
		if !t.Failed() && (diverged == 0 || liveChecked == 0) {
			t.Errorf("diverged %d, live pods checked %d: the test proves nothing", diverged, liveChecked)
		}
	}()
	for seed := uint64(1); seed <= 8; seed++ {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 42))
			f := newFixture(t)
			f.core.opt.Deadline = 10 * time.Second
			var pods []Pod
			doomed := map[string]bool{} // pods that will stop at some point
			for i := range 12 {
				p := f.eventPod(fmt.Sprintf("p%02d", i), fmt.Sprintf("%d:80,%d:53/udp", 9000+i, 9100+i))
				pods = append(pods, p)
				doomed[p.ID] = rng.IntN(2) == 0
			}
			if err := f.core.LoadPorts(ctx); err != nil { // as at start: the state knows our endpoints
				t.Fatal(err)
			}
			stopped := map[string]bool{}
			gone := map[string]bool{}
			for range 300 {
				if rng.IntN(3) == 0 {
					_ = f.sim.InjectFault(hcnsim.Fault{Op: hcnsim.Ops()[rng.IntN(len(hcnsim.Ops()))], Kind: kinds[rng.IntN(len(kinds))],
						After: rng.IntN(2) == 0})
				}
				p := pods[rng.IntN(len(pods))]
				switch op := rng.IntN(8); {
				case op < 2: // the runtime's start, first attempt
					_, _ = f.start(p)
				case op == 2: // the runtime's start, within its deadline
					_ = f.core.StartPod(ctx, p)
				case op == 3: // containerd's /tasks/start
					<-f.started(p.ID)
				case !doomed[p.ID] || rng.IntN(3) != 0:
				case op == 4: // the runtime's stop
					stopped[p.ID] = true
					_, _ = f.stop(p)
				case op == 5: // the pod stops: containerd deletes its namespace
					if !stopped[p.ID] && !gone[p.ID] {
						stopped[p.ID] = true
						f.store.mu.Lock()
						ns := f.store.sbs[p.ID].NetNS
						f.store.tasks[p.ID] = TaskStopped
						f.store.mu.Unlock()
						_ = f.sim.DeleteNamespace(ns)
					}
				case op == 6: // the pod is removed from containerd
					if stopped[p.ID] && !gone[p.ID] {
						gone[p.ID] = true
						f.store.mu.Lock()
						delete(f.store.sbs, p.ID)
						f.store.mu.Unlock()
					}
				}
			}
			f.sim.ClearFaults()
			for _, p := range pods {
				eps := f.endpoints(p.ID)
				if stopped[p.ID] != (len(eps) == 0) || len(eps) > 1 || (len(eps) == 1 && eps[0].Namespace == "") {
					diverged++
				}
			}
			var listed []Pod
			for _, p := range pods {
				if !gone[p.ID] {
					listed = append(listed, p)
				}
			}
			sum, err := f.core.Reconcile(ctx, listed)
			if err != nil || sum.Failed != 0 {
				t.Fatalf("reconcile: %+v, %v", sum, err)
			}
			st := f.sim.State()
			want := 0
			for _, p := range pods {
				eps := f.endpoints(p.ID)
				if stopped[p.ID] {
					if len(eps) != 0 {
						t.Errorf("stopped pod %s keeps %+v", p.ID, eps)
					}
					continue
				}
				want++
				liveChecked++
				policies := request.BuildPolicies(mustParse(t, p.Annotations[request.AnnotationPortMappings]), f.core.opt.Policy)
				if len(eps) != 1 || eps[0].Namespace != f.store.sbs[p.ID].NetNS || !hcn.SamePolicies(eps[0].PortMappings, policies) {
					t.Errorf("live pod %s has %+v, want one endpoint with %v in %s", p.ID, eps, policies, f.store.sbs[p.ID].NetNS)
				}
			}
			if len(st.Endpoints) != want {
				t.Errorf("HCN holds %d endpoints, want %d: %+v", len(st.Endpoints), want, st.Endpoints)
			}
		})
	}
}
