package plugin

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn/hcnsim"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/request"
)

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

func mustParse(t *testing.T, s string) []request.PortMapping {
	t.Helper()
	ms, err := request.ParsePortMappings(s, request.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	return ms
}
