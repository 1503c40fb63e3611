package plugin

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/config"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn/hcnsim"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/admission"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/request"
)

func eventually(t *testing.T, what string, f func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !f() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestStartPodSlowHCN(t *testing.T) {
	for _, failOpen := range []bool{true, false} {
		t.Run(fmt.Sprintf("failOpen=%v", failOpen), func(t *testing.T) {
			f := newFixture(t)
			f.core.opt.Deadline = 50 * time.Millisecond
			f.core.opt.FailOpen = failOpen
			p := f.sandbox("slow", "8080:80")
			f.sim.SetLatency(40 * time.Millisecond) // 3+ calls: well past the deadline
			err := f.core.StartPod(ctx, p)
			if failOpen {
				if err != nil {
					t.Fatalf("fail-open StartPod: %v", err)
				}
				eventually(t, "the endpoint completed in the background", func() bool {
					eps := f.endpoints("slow")
					return len(eps) == 1 && eps[0].Namespace != ""
				})
				return
			}
			if !errors.Is(err, ErrDeadline) {
				t.Fatalf("fail-closed StartPod: %v, want ErrDeadline", err)
			}
			// the work still running finishes and is rolled back
			eventually(t, "the abandoned start finished", func() bool { return !f.core.queued("slow") })
			f.core.Close()
			if eps := f.endpoints("slow"); len(eps) != 0 {
				t.Fatalf("fail-closed left %+v", eps)
			}
		})
	}
}

func TestStartPodRetriesTransientFailures(t *testing.T) {
	f := newFixture(t)
	f.core.opt.Deadline = 5 * time.Second
	p := f.sandbox("flaky", "8080:80")
	for _, op := range []string{hcnsim.OpListEndpointsByName, hcnsim.OpCreateEndpoint, hcnsim.OpAddNamespaceEndpoint} {
		if err := f.sim.InjectFault(hcnsim.Fault{Op: op, Kind: "unavailable"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.core.StartPod(ctx, p); err != nil {
		t.Fatalf("StartPod: %v", err)
	}
	if eps := f.endpoints("flaky"); len(eps) != 1 || eps[0].Namespace == "" {
		t.Fatalf("endpoints %+v", eps)
	}
}

// TestStartPodFinalErrorsFailAtOnce: before and after the first listing
// (after it, the state can tell that a sandbox has no endpoint without
// asking HNS).
func TestStartPodFinalErrorsFailAtOnce(t *testing.T) {
	for _, listed := range []bool{false, true} {
		t.Run(fmt.Sprintf("listed=%v", listed), func(t *testing.T) {
			f := loaded
			if !listed {
				f = func(t *testing.T) *fixture { return newFixture(t) }
			}
			testStartPodFinalErrorsFailAtOnce(t, f(t))
		})
	}
}

func testStartPodFinalErrorsFailAtOnce(t *testing.T, f *fixture) {
	pol, err := admission.Compile(config.DefaultAdmission())
	if err != nil {
		t.Fatal(err)
	}
	f.core.SetAdmission(pol)
	f.core.opt.Deadline = time.Minute // a final error must not wait for it
	tests := []struct {
		pod  Pod
		want error
	}{
		{f.sandbox("rdp", "3389:3389"), admission.ErrDenied},
		{f.sandbox("bad", "80:80/sctp"), ErrInvalidPod},
		{f.sandbox("low", "80:80"), admission.ErrDenied},
	}
	for _, tt := range tests {
		if err := f.core.StartPod(ctx, tt.pod); !errors.Is(err, tt.want) {
			t.Errorf("StartPod(%s) = %v, want %v", tt.pod.Name, err, tt.want)
		}
	}
	if n := len(f.sim.State().Endpoints); n != 0 {
		t.Errorf("%d endpoints for rejected pods", n)
	}
	if n := f.sim.Calls()[hcnsim.OpCreateEndpoint]; n != 0 {
		t.Errorf("HNS asked to create %d endpoints for rejected pods", n)
	}
}

func TestStopPodCancelsRetryingStart(t *testing.T) {
	f := newFixture(t, retryEvery(5*time.Millisecond))
	f.core.opt.Deadline = 20 * time.Millisecond
	f.core.opt.FailOpen = true
	p := f.sandbox("doomed", "8080:80")
	if err := f.sim.InjectFault(hcnsim.Fault{Op: hcnsim.OpCreateEndpoint, Kind: "unavailable", Count: 1 << 20}); err != nil {
		t.Fatal(err)
	}
	if err := f.core.StartPod(ctx, p); err != nil {
		t.Fatal(err)
	}
	// between attempts the start waits in the queue (during one it is
	// out of it): wait for that state rather than look once
	eventually(t, "a start retrying in the background", func() bool { return f.core.queued("doomed") })
	f.core.StopPod(ctx, p)
	eventually(t, "the retrying start was cancelled", func() bool { return !f.core.queued("doomed") })
	f.core.Close()
	if eps := f.endpoints("doomed"); len(eps) != 0 {
		t.Fatalf("endpoints %+v", eps)
	}
}

// TestErrorTable: every kind of error is final or retried, counted and
// reported to owners as the one table says.
func TestErrorTable(t *testing.T) {
	tests := []struct {
		err    error
		retry  retry
		class  string
		reason string
	}{
		{hcn.ErrUnavailable, retryAlways, ClassError, ReasonHNS},
		{fmt.Errorf("x: %w", hcn.ErrTimeout), retryAlways, ClassError, ReasonHNS},
		{context.DeadlineExceeded, retryBounded, ClassError, ReasonHNS},
		{errors.New("E_FAIL"), retryBounded, ClassError, ReasonHNS},
		{fmt.Errorf("x: %w", hcn.ErrPortInUse), retryNever, ClassConflict, ReasonConflict},
		{fmt.Errorf("x: %w", hcn.ErrAttachFailed), retryBounded, ClassError, ReasonHNS},
		{fmt.Errorf("x: %w", hcn.ErrNotInstalled), retryNever, ClassError, ReasonHNS},
		{fmt.Errorf("x: %w", hcn.ErrChanged), retryAlways, ClassError, ReasonHNS},
		{fmt.Errorf("x: %w", request.ErrBadMetadata), retryNever, ClassError, ReasonHostPortsUnknown},
		{fmt.Errorf("x: %w", ErrPortConflict), retryNever, ClassConflict, ReasonConflict},
		{fmt.Errorf("x: %w", errHolderPending), retryAlways, ClassError, ""},
		{fmt.Errorf("x: %w", ErrInvalidPod), retryNever, ClassInvalid, ReasonInvalid},
		{fmt.Errorf("x: %w", ErrHyperV), retryNever, ClassHyperV, ReasonHyperV},
		{fmt.Errorf("x: %w", admission.ErrDenied), retryNever, ClassDenied, ReasonDenied},
		{&hcn.StepError{Step: hcn.StepAttachEndpoint, Err: hcn.ErrNotFound}, retryNever, ClassError, ""},
		{fmt.Errorf("x: %w", ErrSandboxNotFound), retryNever, ClassError, ""},
		{fmt.Errorf("x: %w", ErrNotSandbox), retryNever, "", ""},
		{ErrClosed, retryNever, ClassError, ""},
	}
	for _, tt := range tests {
		k := kindOf(tt.err)
		if k.retry != tt.retry || k.class != tt.class || k.reason != tt.reason {
			t.Errorf("%v: retry %v, class %q, reason %q; want %v, %q, %q", tt.err, k.retry, k.class, k.reason, tt.retry, tt.class, tt.reason)
		}
	}
	if !retries(errors.New("E_FAIL"), UnclassifiedAttempts-1) || retries(errors.New("E_FAIL"), UnclassifiedAttempts) {
		t.Errorf("an unclassified error is not tried exactly %d times", UnclassifiedAttempts)
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

// A pod start parses the annotation once: what the fast path parsed is what
// the endpoint is built from, even if the pod's annotation map were read
// again later (here it is changed while containerd is asked for the sandbox).
func TestStartPodParsesAnnotationOnce(t *testing.T) {
	f := newFixture(t)
	p := f.sandbox("once", "8080:80")
	f.store.onSandbox = func(string) { p.Annotations[request.AnnotationPortMappings] = "not a mapping" }
	if err := f.core.StartPod(ctx, p); err != nil {
		t.Fatalf("StartPod: %v (the annotation was parsed again)", err)
	}
	eps := f.endpoints(p.ID)
	if len(eps) != 1 || len(eps[0].PortMappings) != 1 || eps[0].PortMappings[0].ExternalPort != 8080 {
		t.Fatalf("endpoints = %+v, want one mapping 8080", eps)
	}
}

// Over the cap, a pod start fails at once, naming the pod, the count and the
// limit, and HNS is not asked for anything.
func TestStartPodOverTheCap(t *testing.T) {
	f := newFixture(t)
	f.core.opt.Limits = request.Limits{MaxMappings: 2, MaxBytes: 64}
	tests := []struct{ name, annotation, want string }{
		{"entries", "8080:80,8081:80,8082:80", "pod default/pod-entries: annotation hcn.nri.io/port-mappings: invalid pod request: 3 entries, more than the limit of 2 (plugin.max_mappings_per_pod)"},
		{"bytes", strings.Repeat(" ", 60) + "8080:80", "pod default/pod-bytes: annotation hcn.nri.io/port-mappings: invalid pod request: 67 bytes, more than the limit of 64 (plugin.max_annotation_bytes)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := f.sandbox(tt.name, tt.annotation)
			f.store.onSandbox = func(string) { t.Error("containerd was asked about a pod rejected on its annotation") }
			err := f.core.StartPod(ctx, p)
			if err == nil || err.Error() != tt.want || !errors.Is(err, ErrInvalidPod) || !errors.Is(err, request.ErrTooLarge) {
				t.Fatalf("StartPod = %v, want %q", err, tt.want)
			}
			if st := f.sim.State(); len(st.Endpoints) != 0 || len(st.Networks) != 0 {
				t.Fatalf("HCN changed: %+v", st)
			}
		})
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

// Issue 10, item 2: a Hyper-V isolated pod's utility VM takes the
// namespace's endpoints only when it starts; an endpoint added by us would
// never reach it, so the pod is refused with an error that says so.
func TestHyperVPodsAreRefused(t *testing.T) {
	tests := []struct {
		name     string
		handlers []string // nil: the configured default
		hyperV   string   // SandboxInfo.HyperV
		handler  string   // the NRI pod's runtime handler
		criMeta  string   // partial pod: runtime handler in the CRI record
		mapping  string
		refused  string // "" when the pod gets its endpoint
	}{
		{"container record says Hyper-V", nil, "runhcs runtime options: SandboxIsolation HYPERVISOR", "", "", "8080:80", "SandboxIsolation HYPERVISOR"},
		{"default Hyper-V runtime handler", nil, "", "runhcs-wcow-hypervisor", "", "8080:80", "runtime handler runhcs-wcow-hypervisor"},
		{"handler from the CRI record of a partial pod", nil, "", "", "runhcs-wcow-hypervisor", "8080:80", "runtime handler runhcs-wcow-hypervisor"},
		{"process-isolated handler", nil, "", "runhcs-wcow-process", "", "8080:80", ""},
		{"configured handlers replace the default", []string{"wcow-vm"}, "", "wcow-vm", "", "8080:80", "runtime handler wcow-vm"},
		{"default no longer listed", []string{"wcow-vm"}, "", "runhcs-wcow-hypervisor", "", "8080:80", ""},
		{"Hyper-V pod without host ports: nothing to refuse", nil, "SandboxIsolation HYPERVISOR", "", "", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			f.core.opt.HyperVHandlers = []string{"runhcs-wcow-hypervisor"} // config.Default's
			if tt.handlers != nil {
				f.core.opt.HyperVHandlers = tt.handlers
			}
			p := f.sandbox("hv", tt.mapping)
			p.RuntimeHandler = tt.handler
			f.store.sbs["hv"].HyperV = tt.hyperV
			if tt.criMeta != "" {
				f.store.sbs["hv"].Metadata = []byte(`{"Version":"v1","Metadata":{"ID":"hv","Name":"p_ns_uid_0","RuntimeHandler":"` + tt.criMeta +
					`","Config":{"metadata":{"name":"p","uid":"uid","namespace":"ns"},"annotations":{"` +
					request.AnnotationPortMappings + `":"` + tt.mapping + `"}}}}`)
				p = Pod{ID: "hv", Partial: true}
			}
			err := f.core.StartPod(ctx, p)
			if tt.refused == "" {
				if err != nil {
					t.Fatalf("StartPod = %v, want no error", err)
				}
				if want := min(len(tt.mapping), 1); len(f.endpoints("hv")) != want {
					t.Fatalf("endpoints %+v, want %d", f.endpoints("hv"), want)
				}
				return
			}
			if !errors.Is(err, ErrHyperV) || !errors.Is(err, ErrInvalidPod) {
				t.Fatalf("StartPod = %v, want ErrHyperV", err)
			}
			if msg := err.Error(); !strings.Contains(msg, tt.refused) || !strings.Contains(msg, "portMappings") || !strings.Contains(msg, "pod ") {
				t.Errorf("error %q does not name the pod, %q and the way out", msg, tt.refused)
			}
			if n := f.sim.Calls()[hcnsim.OpCreateEndpoint]; n != 0 || len(f.sim.State().Endpoints) != 0 {
				t.Errorf("HNS asked to create %d endpoints for a Hyper-V pod", n)
			}
		})
	}
}

// A conflict whose holder is gone but whose ports could not be freed at
// once (HNS refused the delete) is not taken for a conflict: the start is
// retried and takes the port.
func TestConflictWithAHolderThatCannotBeFreedYetIsRetried(t *testing.T) {
	f := newFixture(t)
	f.core.opt.Deadline = 5 * time.Second
	gone := f.sandbox("gone", "8080:80")
	if err := f.core.StartPod(ctx, gone); err != nil {
		t.Fatal(err)
	}
	f.store.mu.Lock()
	delete(f.store.sbs, "gone") // vanished without a stop event
	f.store.mu.Unlock()
	_ = f.sim.InjectFault(hcnsim.Fault{Op: hcnsim.OpDeleteEndpoint, Kind: "in-use", Count: 1})
	next := f.sandbox("next", "8080:80")
	if err := f.core.StartPod(ctx, next); err != nil {
		t.Fatalf("StartPod: %v, want the port once the vanished holder's endpoint is deleted", err)
	}
	if eps := f.endpoints("next"); len(eps) != 1 || eps[0].Namespace == "" {
		t.Fatalf("next: %+v", eps)
	}
	if eps := f.endpoints("gone"); len(eps) != 0 {
		t.Fatalf("the vanished holder keeps %+v", eps)
	}
}

// loaded is a fixture whose state has taken its first listing of HNS, as
// after start-up: only then does it know that a sandbox has no endpoint
// without asking HNS.
func loaded(t *testing.T) *fixture {
	t.Helper()
	f := newFixture(t)
	f.core.opt.Deadline = 5 * time.Second
	if err := f.core.LoadPorts(ctx); err != nil {
		t.Fatal(err)
	}
	return f
}

// A start that turns out to get no endpoint (what containerd says of the
// sandbox, a stop meanwhile, HNS refusing) leaves nothing in HNS and gives
// its host port back: the next pod asking for it gets it.
func TestStartWithoutAnEndpointLeavesThePortFree(t *testing.T) {
	for _, tc := range []struct {
		name    string
		arrange func(f *fixture, p Pod)
		wantErr error // nil: the pod starts, skipped
	}{
		{"no Windows namespace", func(f *fixture, p Pod) { f.store.sbs[p.ID].NetNS = "" }, nil},
		{"Hyper-V isolated", func(f *fixture, p Pod) { f.store.sbs[p.ID].HyperV = "OCI spec: Windows.HyperV is set" }, ErrHyperV},
		{"sandbox not in containerd", func(f *fixture, p Pod) { delete(f.store.sbs, p.ID) }, ErrSandboxNotFound},
		{"stopped while containerd is asked", func(f *fixture, p Pod) {
			f.store.onSandbox = func(id string) { f.exited(id) }
		}, nil},
		{"attach refused", func(f *fixture, _ Pod) {
			_ = f.sim.InjectFault(hcnsim.Fault{Op: hcnsim.OpAddNamespaceEndpoint, Kind: "invalid", Count: 1})
		}, hcn.ErrInvalid},
		{"create refused", func(f *fixture, _ Pod) {
			_ = f.sim.InjectFault(hcnsim.Fault{Op: hcnsim.OpCreateEndpoint, Kind: "invalid", Count: 1})
		}, hcn.ErrInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := loaded(t)
			p := f.sandbox("p", "8080:80")
			tc.arrange(f, p)
			err := f.core.StartPod(ctx, p)
			switch {
			case tc.wantErr == nil && err != nil:
				t.Fatalf("StartPod: %v, want the pod started without an endpoint", err)
			case tc.wantErr != nil && !errors.Is(err, tc.wantErr):
				t.Fatalf("StartPod: %v, want %v", err, tc.wantErr)
			}
			f.store.hookSandbox(nil)
			eventually(t, "nothing of p left in HNS", func() bool { return len(f.endpoints("p")) == 0 })
			// the host port is free: another pod takes it
			q := f.sandbox("q", "8080:80")
			if err := f.core.StartPod(ctx, q); err != nil {
				t.Fatalf("the next pod asking for the port: %v", err)
			}
		})
	}
}

// An old endpoint of ours with other mappings (left by a crash) is replaced
// by the start, not joined by a second one, and containerd is asked once.
func TestStartReplacesAnOldEndpointOfOurs(t *testing.T) {
	f := newFixture(t) // no listing taken: HNS is asked what the sandbox has
	f.core.opt.Deadline = 5 * time.Second
	p := f.sandbox("a", "8080:80")
	netID, err := f.core.mgr.EnsureNetwork(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.sim.AddStaleEndpoint(hcn.EndpointSpec{Name: f.core.mgr.EndpointName("a"), NetworkID: netID,
		PortMappings: []hcn.PortMappingPolicy{{InternalPort: 80, ExternalPort: 9999, Protocol: 6}}}, ""); err != nil {
		t.Fatal(err)
	}
	lookups := 0
	f.store.onSandbox = func(string) { lookups++ }
	if err := f.core.StartPod(ctx, p); err != nil {
		t.Fatal(err)
	}
	eps := f.endpoints("a")
	if len(eps) != 1 || eps[0].PortMappings[0].ExternalPort != 8080 || eps[0].Namespace == "" {
		t.Fatalf("endpoints: %+v", eps)
	}
	if lookups != 1 {
		t.Fatalf("containerd asked %d times for the sandbox, want once", lookups)
	}
	if n := f.core.Endpoints(); n != 1 {
		t.Fatalf("the state knows %d sandboxes with endpoints, want 1", n)
	}
}

// With the listing taken at start-up, the state knows what the plugin's
// sandboxes have: a start costs create and attach, a stop detach and
// delete, and a sandbox that never had an endpoint costs no HNS call at all.
func TestKnownEndpointsSaveHNSCalls(t *testing.T) {
	f := loaded(t)
	warm := f.sandbox("warm", "8081:80")
	if err := f.core.StartPod(ctx, warm); err != nil { // creates the network
		t.Fatal(err)
	}
	before := f.sim.Calls()
	p := f.sandbox("sb1", "8080:80")
	if err := f.core.StartPod(ctx, p); err != nil {
		t.Fatal(err)
	}
	f.core.StopPod(ctx, p)
	f.core.StopPod(ctx, f.sandbox("never-mapped", ""))
	after := f.sim.Calls()
	total := 0
	for op, n := range after {
		total += n - before[op]
	}
	if total != 4 || after[hcnsim.OpListEndpointsByName] != before[hcnsim.OpListEndpointsByName] {
		t.Errorf("%d HNS calls (%v -> %v), want 4 (create, attach, detach, delete) and no listing", total, before, after)
	}
}

// What HNS holds, not the state, decides: an endpoint deleted behind the
// plugin's back is noticed by the resync's listing and built again; after a
// failed operation HNS is asked again.
func TestKnownEndpointsRecheckedAfterExternalChange(t *testing.T) {
	f := loaded(t)
	p := f.sandbox("sb1", "8080:80")
	if err := f.core.StartPod(ctx, p); err != nil {
		t.Fatal(err)
	}
	ep := f.endpoints("sb1")[0]
	if err := f.sim.RemoveNamespaceEndpoint(ctx, ep.Namespace, ep.ID); err != nil { // an operator, behind our back
		t.Fatal(err)
	}
	if err := f.sim.DeleteEndpoint(ctx, ep.ID); err != nil {
		t.Fatal(err)
	}
	if sum, err := f.core.ReconcileAll(ctx); err != nil || sum.Created != 1 {
		t.Fatalf("resync = %+v, %v; want the endpoint built again", sum, err)
	}
	_ = f.sim.InjectFault(hcnsim.Fault{Op: hcnsim.OpRemoveNamespaceEndpoint, Kind: "internal"})
	before := f.sim.Calls()[hcnsim.OpListEndpointsByName]
	f.core.StopPod(ctx, p) // fails once, then the retry asks HNS what is there
	eventually(t, "the endpoint removed", func() bool { return len(f.endpoints("sb1")) == 0 })
	if f.sim.Calls()[hcnsim.OpListEndpointsByName] != before+1 {
		t.Error("after a failure the next attempt did not ask HNS")
	}
}
