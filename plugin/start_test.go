package plugin

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

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
// (after it, a start may create the endpoint during the containerd lookup:
// not for a pod that is refused anyway).
func TestStartPodFinalErrorsFailAtOnce(t *testing.T) {
	for _, listed := range []bool{false, true} {
		t.Run(fmt.Sprintf("listed=%v", listed), func(t *testing.T) {
			f := loaded
			if !listed {
				f = newFixture
			}
			testStartPodFinalErrorsFailAtOnce(t, f(t))
		})
	}
}

func testStartPodFinalErrorsFailAtOnce(t *testing.T, f *fixture) {
	pol, err := admission.Compile(admission.DefaultRules())
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
	f := newFixture(t)
	f.core.opt.Deadline = 20 * time.Millisecond
	f.core.opt.FailOpen = true
	f.core.opt.RetryMin, f.core.opt.RetryMax = 5*time.Millisecond, 5*time.Millisecond
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

func TestTransient(t *testing.T) {
	tests := []struct {
		err  error
		want bool
	}{
		{nil, false},
		{hcn.ErrUnavailable, true},
		{context.DeadlineExceeded, true},
		{errors.New("E_FAIL"), true},
		{fmt.Errorf("x: %w", hcn.ErrPortInUse), false},
		{fmt.Errorf("x: %w", ErrPortConflict), false},
		{fmt.Errorf("x: %w", ErrInvalidPod), false},
		{fmt.Errorf("x: %w", admission.ErrDenied), false},
		{&hcn.StepError{Step: hcn.StepAttachEndpoint, Err: hcn.ErrNotFound}, false},
		{fmt.Errorf("x: %w", ErrSandboxNotFound), false},
	}
	for _, tt := range tests {
		if got := transient(tt.err); got != tt.want {
			t.Errorf("transient(%v) = %v, want %v", tt.err, got, tt.want)
		}
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
	p := f.sandbox("slow", "8080:80")
	f.sim.SetOpLatency(hcnsim.OpCreateEndpoint, time.Hour) // HNS hangs
	f.core.Started(p, nil)
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
