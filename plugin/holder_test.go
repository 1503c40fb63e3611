package plugin

import (
	"testing"
	"time"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn/hcnsim"
)

// Regression (a reconcile that meets a busy port holder never retried): the
// plugin lost containerd for a while; meanwhile pod A was removed and its
// successor B asks for A's host port. The reconcile after reconnecting
// works on A and B in parallel, and B finds A's removal running. B must
// get its endpoint by itself, without a later resync.
func TestReconcileRetriesASuccessorWaitingForItsHolder(t *testing.T) {
	f := newFixture(t)
	a := f.eventPod("a", "8080:80")
	if err := startedAndWait(t, f, a); err != nil {
		t.Fatal(err)
	}
	// A is removed while nobody listens, B starts while nobody listens
	if err := f.sim.DeleteNamespace(f.store.sbs["a"].NetNS); err != nil {
		t.Fatal(err)
	}
	f.store.mu.Lock()
	delete(f.store.sbs, "a")
	f.store.mu.Unlock()
	b := f.eventPod("b", "8080:80")
	// A's removal is under way (HNS slow to delete) when B asks for the port
	f.sim.SetOpLatency(hcnsim.OpDeleteEndpoint, 300*time.Millisecond)
	f.store.hookSandbox(func(id string) {
		if id == "b" { // (not t.Fatal: this runs on a worker)
			for deadline := time.Now().Add(5 * time.Second); f.sim.Calls()[hcnsim.OpDeleteEndpoint] < 1 && time.Now().Before(deadline); {
				time.Sleep(time.Millisecond)
			}
		}
	})
	if _, err := f.core.ReconcileAll(ctx); err != nil {
		t.Fatal(err)
	}
	f.store.hookSandbox(nil)
	eventually(t, "B has its endpoint without another resync", func() bool {
		eps := f.endpoints("b")
		return len(eps) == 1 && eps[0].Namespace == f.store.sbs["b"].NetNS
	})
	_ = b
}
