package plugin

import (
	"errors"
	"testing"
	"time"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn/hcnsim"
)

// Behaviours that no test guarded before the core became one controller
// (each was changed in the code and every test stayed green). They drive
// the core only through the entry points its event sources use.

// startedAndWait hands the core a start seen on containerd's event stream
// and waits for its final result.
func startedAndWait(t *testing.T, f *fixture, p Pod) error {
	t.Helper()
	return waitResult(t, f.started(p.ID))
}

// stoppedAndWait hands the core a stop seen on containerd's event stream
// (a task exit: the ID may name an application container) and waits.
func stoppedAndWait(t *testing.T, f *fixture, p Pod) error {
	t.Helper()
	return waitResult(t, f.exited(p.ID))
}

func waitResult(t *testing.T, done <-chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(20 * time.Second): // a guard against a hang, not a timing target
		t.Fatal("the work never reported a result")
		return nil
	}
}

// never fails the test if cond becomes true at any poll over d: "nothing
// happens" holds over a window, not on one look.
func never(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		if cond() {
			t.Fatalf("%s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// eventPod is a sandbox whose request containerd's CRI record holds (the
// event path reads it from there).
func (f *fixture) eventPod(id, annotation string) Pod {
	p := f.sandbox(id, annotation)
	f.store.mu.Lock()
	f.store.sbs[id].Metadata = criMeta(annotation, "")
	f.store.mu.Unlock()
	return p
}

// A /tasks/start that arrives late, or twice, after the sandbox's
// /tasks/exit does not bring its endpoint back: a stop is final. Both while
// the stop is still being worked on (HNS slow to delete) and after it.
func TestStartAfterStopDoesNotBringTheEndpointBack(t *testing.T) {
	for _, pending := range []bool{false, true} {
		name := "after the stop finished"
		if pending {
			name = "while the stop is pending"
		}
		t.Run(name, func(t *testing.T) {
			f := newFixture(t)
			p := f.eventPod("p", "8080:80")
			if err := startedAndWait(t, f, p); err != nil || len(f.endpoints("p")) != 1 {
				t.Fatalf("start: %v, %+v", err, f.endpoints("p"))
			}
			if pending {
				f.sim.SetOpLatency(hcnsim.OpDeleteEndpoint, 150*time.Millisecond)
			}
			stopDone := f.exited(p.ID)
			if !pending {
				if err := waitResult(t, stopDone); err != nil {
					t.Fatal(err)
				}
			}
			// the late or duplicate start
			startDone := f.started(p.ID)
			if pending {
				if err := waitResult(t, stopDone); err != nil {
					t.Fatal(err)
				}
			}
			select {
			case <-startDone:
			case <-time.After(2 * time.Second): // merged into the stop: told nothing more
			}
			never(t, 300*time.Millisecond, "the endpoint came back after the stop", func() bool { return len(f.endpoints("p")) > 0 })
		})
	}
}

// A stop that HNS makes retry stays a stop when a resync's work for the same
// sandbox arrives meanwhile, even though containerd still lists the task as
// running (the exit event came first).
func TestRetryingStopStaysAStopWhenAResyncArrives(t *testing.T) {
	f := newFixture(t)
	p := f.eventPod("p", "8080:80")
	if err := startedAndWait(t, f, p); err != nil {
		t.Fatal(err)
	}
	if err := f.sim.InjectFault(hcnsim.Fault{Op: hcnsim.OpRemoveNamespaceEndpoint, Kind: "unavailable", Count: 3}); err != nil {
		t.Fatal(err)
	}
	stopDone := f.exited(p.ID)
	eventually(t, "the stop is retrying", func() bool { return f.sim.Calls()[hcnsim.OpRemoveNamespaceEndpoint] >= 1 })
	if _, err := f.core.ReconcileAll(ctx); err != nil { // the resync: containerd lists p, task running
		t.Fatal(err)
	}
	if err := waitResult(t, stopDone); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if _, err := f.core.ReconcileAll(ctx); err != nil {
		t.Fatal(err)
	}
	never(t, 300*time.Millisecond, "the resync brought the stopped sandbox's endpoint back", func() bool { return len(f.endpoints("p")) > 0 })
}

// The rolling update of a hostPort pod: the new pod asks for the port while
// the old one's stop is being worked on (HNS slow to delete). The new pod
// is not refused for good: it gets the port once the old endpoint is gone.
func TestPodGetsThePortOfAHolderThatIsStopping(t *testing.T) {
	f := newFixture(t)
	f.core.opt.Deadline = 5 * time.Second
	old := f.eventPod("old", "8080:80")
	if err := startedAndWait(t, f, old); err != nil {
		t.Fatal(err)
	}
	f.sim.SetOpLatency(hcnsim.OpDeleteEndpoint, 200*time.Millisecond)
	stopDone := f.exited(old.ID)
	next := f.sandbox("next", "8080:80")
	if err := f.core.StartPod(ctx, next); err != nil {
		t.Fatalf("the successor was refused: %v", err)
	}
	if err := waitResult(t, stopDone); err != nil {
		t.Fatal(err)
	}
	if eps := f.endpoints("next"); len(eps) != 1 || eps[0].Namespace == "" {
		t.Fatalf("successor: %+v", eps)
	}
	if eps := f.endpoints("old"); len(eps) != 0 {
		t.Fatalf("old: %+v", eps)
	}
}

// A pod whose HNS create failed for good gives its host ports back at once:
// the next pod asking for them is not refused.
func TestFinalCreateFailureGivesThePortsBack(t *testing.T) {
	f := newFixture(t)
	if err := f.sim.InjectFault(hcnsim.Fault{Op: hcnsim.OpCreateEndpoint, Kind: "invalid", Count: 1}); err != nil {
		t.Fatal(err)
	}
	a := f.sandbox("a", "8080:80")
	if err := f.core.StartPod(ctx, a); err == nil {
		t.Fatal("StartPod succeeded through a refused create")
	}
	b := f.sandbox("b", "8080:80")
	if err := f.core.StartPod(ctx, b); err != nil {
		t.Fatalf("the next pod was refused the port of a pod that never got it: %v", err)
	}
}

// A task event for a sandbox containerd has already forgotten (or cannot
// tell about right now) still removes its endpoint.
func TestTaskEventForAForgottenSandboxRemovesTheEndpoint(t *testing.T) {
	for _, tc := range []struct {
		name    string
		arrange func(f *fixture)
	}{
		{"containerd forgot it", func(f *fixture) {
			f.store.mu.Lock()
			delete(f.store.sbs, "p")
			f.store.mu.Unlock()
		}},
		{"containerd cannot be asked", func(f *fixture) { f.store.failSandbox = errors.New("containerd: connection refused") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			p := f.eventPod("p", "8080:80")
			if err := startedAndWait(t, f, p); err != nil {
				t.Fatal(err)
			}
			tc.arrange(f)
			if err := stoppedAndWait(t, f, p); err != nil {
				t.Fatalf("stop: %v", err)
			}
			if eps := f.endpoints("p"); len(eps) != 0 {
				t.Fatalf("endpoint left: %+v", eps)
			}
		})
	}
}

// One pod stop on the event path does its HNS and containerd work once,
// however many of the three stop events arrive (containerd 2.x sometimes
// sends no /tasks/delete, so all three are followed): /tasks/exit removes
// the endpoint, /tasks/delete and /containers/delete find nothing left to
// do and ask nobody.
func TestOneStopDoesItsWorkOnce(t *testing.T) {
	f := loaded(t)
	p := f.eventPod("p", "8080:80")
	if err := startedAndWait(t, f, p); err != nil {
		t.Fatal(err)
	}
	lookups := 0
	f.store.hookSandbox(func(string) { lookups++ })
	before := f.sim.Calls()
	for _, ev := range []func(string) <-chan error{f.exited, f.exited, f.deleted} {
		if err := waitResult(t, ev(p.ID)); err != nil {
			t.Fatal(err)
		}
	}
	after := f.sim.Calls()
	total := 0
	for op, n := range after {
		total += n - before[op]
	}
	if total != 2 || after[hcnsim.OpDeleteEndpoint]-before[hcnsim.OpDeleteEndpoint] != 1 || lookups != 0 {
		t.Fatalf("%d HNS calls (%v -> %v) and %d containerd lookups; want detach and delete, once, and no lookup", total, before, after, lookups)
	}
	if c := f.core.st.counts(); c.records != 0 {
		t.Fatalf("the state keeps %+v after containerd deleted the sandbox", c)
	}
}
