package plugin

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn/hcnsim"
)

// Regressions from the load-and-faults review, each seen failing on the code
// before its fix.

// 2: an endpoint deleted outside the plugin plus a sandbox gone without a
// stop event left the port index (and the manager's cache) holding the
// sandbox forever: a new pod asking for its port was refused until restart.
func TestReconcileForgetsWhatOnlyWeBelievedIn(t *testing.T) {
	f := newFixture(t)
	a := f.sandbox("a", "8080:80")
	if _, err := f.start(a); err != nil {
		t.Fatal(err)
	}
	ep := f.endpoints("a")[0]
	if err := f.sim.RemoveNamespaceEndpoint(ctx, ep.Namespace, ep.ID); err != nil { // an operator, behind our back
		t.Fatal(err)
	}
	if err := f.sim.DeleteEndpoint(ctx, ep.ID); err != nil {
		t.Fatal(err)
	}
	f.store.mu.Lock()
	delete(f.store.sbs, "a") // gone, and nobody told us
	f.store.mu.Unlock()
	if _, err := f.core.ReconcileAll(ctx); err != nil {
		t.Fatal(err)
	}
	if n := f.core.st.counts().holding; n != 0 {
		t.Errorf("port index still holds %d sandboxes", n)
	}
	if n := f.core.Endpoints(); n != 0 {
		t.Errorf("the state still knows %d sandboxes with endpoints", n)
	}
	b := f.sandbox("b", "8080:80")
	if err := f.core.StartPod(ctx, b); err != nil {
		t.Fatalf("new pod refused: %v", err)
	}
}

// 10: after a restart, the orphan of a pod stopped while the plugin was down
// held its host port until the background reconcile removed it: a new pod
// asking for that port in the meantime was refused.
func TestNewPodReclaimsThePortOfAnOrphan(t *testing.T) {
	f := newFixture(t)
	old := f.sandbox("old", "8080:80")
	if _, err := f.start(old); err != nil {
		t.Fatal(err)
	}
	// the plugin restarts; meanwhile the old pod stopped
	f.core.Close()
	f.store.mu.Lock()
	f.store.tasks["old"] = TaskStopped
	f.store.mu.Unlock()
	restarted := NewCore(f.core.mgr, f.store, f.core.opt, f.core.log)
	t.Cleanup(restarted.Close)
	if err := restarted.LoadPorts(ctx); err != nil { // what start-up does, before any reconcile
		t.Fatal(err)
	}
	f.core = restarted
	next := f.sandbox("next", "8080:80")
	if err := f.core.StartPod(ctx, next); err != nil {
		t.Fatalf("new pod refused: %v", err)
	}
	if eps := f.endpoints("old"); len(eps) != 0 {
		t.Fatalf("orphan kept: %+v", eps)
	}
	if eps := f.endpoints("next"); len(eps) != 1 || eps[0].Namespace == "" {
		t.Fatalf("new pod has %+v", eps)
	}
	// a running holder keeps its port
	third := f.sandbox("third", "8080:80")
	if err := f.core.StartPod(ctx, third); !errors.Is(err, ErrPortConflict) {
		t.Fatalf("StartPod(third) = %v, want a conflict with the running pod", err)
	}
}

// 11: a reconcile working from a snapshot re-created the endpoint of a pod
// stopped after the snapshot whose task was already gone while its
// namespace still existed (containerd tears the namespace down last).
func TestStopWinsOverAReconcileThatStartedBefore(t *testing.T) {
	f := newFixture(t)
	p := f.sandbox("p", "8080:80")
	if _, err := f.start(p); err != nil {
		t.Fatal(err)
	}
	snapshot := []Pod{p}                 // what Synchronize listed
	if _, err := f.stop(p); err != nil { // the stop
		t.Fatal(err)
	}
	f.store.mu.Lock()
	f.store.tasks["p"] = TaskUnknown // task deleted, namespace not yet
	f.store.mu.Unlock()
	if _, err := f.core.Reconcile(ctx, snapshot); err != nil {
		t.Fatal(err)
	}
	if eps := f.endpoints("p"); len(eps) != 0 {
		t.Fatalf("the reconcile resurrected %+v", eps)
	}
	if err := f.core.StartPod(ctx, p); err != nil || len(f.endpoints("p")) != 0 {
		t.Fatalf("a late start of the stopped pod: %v, %+v", err, f.endpoints("p"))
	}
	// once containerd forgets the sandbox, so do we
	f.store.mu.Lock()
	delete(f.store.sbs, "p")
	f.store.mu.Unlock()
	if _, err := f.core.ReconcileAll(ctx); err != nil {
		t.Fatal(err)
	}
	if c := f.core.st.counts(); c.tombstones != 0 || c.records != 0 {
		t.Fatalf("the state keeps %+v", c)
	}
}

// 5: a fail-closed start given up on during its backoff wait tried again,
// creating an endpoint only to roll it back.
func TestAbandonedStartDoesNotTryAgain(t *testing.T) {
	f := newFixture(t, retryEvery(150*time.Millisecond))
	f.core.opt.FailOpen = false
	f.core.opt.Deadline = 30 * time.Millisecond
	p := f.sandbox("p", "8080:80")
	if err := f.sim.InjectFault(hcnsim.Fault{Op: hcnsim.OpCreateEndpoint, Kind: "unavailable", Count: 1}); err != nil {
		t.Fatal(err)
	}
	if err := f.core.StartPod(ctx, p); !errors.Is(err, ErrDeadline) {
		t.Fatalf("StartPod = %v, want ErrDeadline", err)
	}
	eventually(t, "the abandoned start ended", func() bool { return !f.core.queued("p") })
	if n := f.sim.Calls()[hcnsim.OpCreateEndpoint]; n != 1 {
		t.Fatalf("CreateEndpoint called %d times, want 1 (no attempt after giving up)", n)
	}
	if eps := f.endpoints("p"); len(eps) != 0 {
		t.Fatalf("left %+v", eps)
	}
}

// An endpoint detached behind our back is re-attached by the next
// reconcile: HNS, not the cache, decides.
func TestReconcileReattachesWhatWasDetachedBehindOurBack(t *testing.T) {
	f := newFixture(t)
	p := f.sandbox("p", "8080:80")
	if _, err := f.start(p); err != nil {
		t.Fatal(err)
	}
	if err := f.core.LoadPorts(ctx); err != nil { // the cache is trusted from here
		t.Fatal(err)
	}
	ep := f.endpoints("p")[0]
	if err := f.sim.RemoveNamespaceEndpoint(ctx, ep.Namespace, ep.ID); err != nil {
		t.Fatal(err)
	}
	sum, err := f.core.Reconcile(ctx, []Pod{p}) // as Synchronize does
	if err != nil || sum.Created != 1 {
		t.Fatalf("ReconcileAll = %+v, %v; want one repair", sum, err)
	}
	if eps := f.endpoints("p"); len(eps) != 1 || eps[0].Namespace != ep.Namespace {
		t.Fatalf("endpoint %+v, want it attached to %s again", eps, ep.Namespace)
	}
}

// A host port released on removal is free for the next pod.
func TestRemovedPodsPortGoesToTheNextPod(t *testing.T) {
	f := newFixture(t)
	a, b := f.sandbox("a", "8080:80"), f.sandbox("b", "8080:80")
	if err := f.core.StartPod(ctx, a); err != nil {
		t.Fatal(err)
	}
	if err := f.core.StartPod(ctx, b); !errors.Is(err, ErrPortConflict) {
		t.Fatalf("b while a holds the port: %v", err)
	}
	f.core.StopPod(context.Background(), a)
	if err := f.core.StartPod(ctx, b); err != nil {
		t.Fatalf("b after a stopped: %v", err)
	}
	if eps := f.endpoints("b"); len(eps) != 1 || !hcn.SamePolicies(eps[0].PortMappings, []hcn.PortMappingPolicy{{Protocol: hcn.TCP, ExternalPort: 8080, InternalPort: 80, Flags: 1}}) {
		t.Fatalf("b has %+v", eps)
	}
}

// Issue 10: an HNS error nobody has classified was retried forever; it is
// now retried a bounded number of times and reported failed, while HNS
// being unreachable is still retried until it passes.
func TestUnclassifiedErrorsAreRetriedABoundedNumberOfTimes(t *testing.T) {
	f := newFixture(t)
	p := f.sandbox("odd", "8080:80")
	if err := f.sim.InjectFault(hcnsim.Fault{Op: hcnsim.OpCreateEndpoint, Kind: "internal", Count: 100}); err != nil {
		t.Fatal(err)
	}
	err := f.startRetrying(p)
	if err == nil || kindOf(err).retry != retryBounded || hcn.Retryable(err) {
		t.Fatalf("EnsureRetrying = %v, want the unclassified error", err)
	}
	if n := f.sim.Calls()[hcnsim.OpCreateEndpoint]; n != UnclassifiedAttempts {
		t.Fatalf("%d creates, want %d", n, UnclassifiedAttempts)
	}
	f.sim.ClearFaults()
	q := f.sandbox("unreachable", "8081:80")
	if err := f.sim.InjectFault(hcnsim.Fault{Op: hcnsim.OpCreateEndpoint, Kind: "unavailable", Count: UnclassifiedAttempts + 3}); err != nil {
		t.Fatal(err)
	}
	if err := f.startRetrying(q); err != nil {
		t.Fatalf("an unreachable HNS must be retried until it answers: %v", err)
	}
}

// Issue 24, 2 and issue 30, 2, through the controller: an HNS that reads
// endpoints back with less than was sent (without their routes: older
// builds do not store them) or with more (the node's DNS filled in) does
// not make a resync rebuild them, and neither does a restart: a fresh
// process has not learned what this HNS keeps, and adopts what it finds.
// Under every read-back variant the simulator has, with the pod's DNS
// known (the CRI record) or not.
func TestNothingIsRebuiltByAResyncOrARestart(t *testing.T) {
	for _, rules := range []hcnsim.Rules{{}, {DropRoutes: true}, {NoDNSFill: true}, {DropRoutes: true, NoDNSFill: true}} {
		for _, dns := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/pod-dns=%v", rules, dns), func(t *testing.T) {
				f := newFixture(t)
				f.sim.SetRules(rules)
				if err := f.core.LoadPorts(ctx); err != nil {
					t.Fatal(err)
				}
				var ids []string
				for i := range 3 {
					id := fmt.Sprint("p", i)
					p := f.eventPod(id, fmt.Sprintf("%d:80", 8080+i))
					if dns {
						f.store.sbs[id].Metadata = criMetaDNS(fmt.Sprintf("%d:80", 8080+i), "10.96.0.10")
					}
					if err := f.core.StartPod(ctx, p); err != nil {
						t.Fatal(err)
					}
					ids = append(ids, f.endpoints(id)[0].ID)
				}
				check := func(when string) {
					t.Helper()
					for i, want := range ids {
						if eps := f.endpoints(fmt.Sprint("p", i)); len(eps) != 1 || eps[0].ID != want || eps[0].Namespace == "" {
							t.Fatalf("%s: p%d has %+v, want %s kept", when, i, eps, want)
						}
					}
				}
				for range 3 {
					if sum, err := f.core.ReconcileAll(ctx); err != nil || sum.Created != 0 {
						t.Fatalf("resync = %+v, %v: rebuilt", sum, err)
					}
				}
				check("after resyncs")
				f.restartWith(t, testManagerConfig(), nil) // a new process: nothing learned
				if err := f.core.LoadPorts(ctx); err != nil {
					t.Fatal(err)
				}
				for range 3 {
					if sum, err := f.core.ReconcileAll(ctx); err != nil || sum.Created != 0 {
						t.Fatalf("resync after a restart = %+v, %v: rebuilt", sum, err)
					}
				}
				check("after a restart")
			})
		}
	}
}
