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
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/hostsockets"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/request"
)

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
	if n := f.sim.Calls()[hcnsim.OpCreateEndpoint]; n != config.UnclassifiedAttempts {
		t.Fatalf("%d creates, want %d", n, config.UnclassifiedAttempts)
	}
	f.sim.ClearFaults()
	q := f.sandbox("unreachable", "8081:80")
	if err := f.sim.InjectFault(hcnsim.Fault{Op: hcnsim.OpCreateEndpoint, Kind: "unavailable", Count: config.UnclassifiedAttempts + 3}); err != nil {
		t.Fatal(err)
	}
	if err := f.startRetrying(q); err != nil {
		t.Fatalf("an unreachable HNS must be retried until it answers: %v", err)
	}
}

// TestErrorTable: every kind of error is final or retried, counted and
// reported to owners as the one table says.
func TestEveryErrorIsJudgedByItsRow(t *testing.T) {
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
		{fmt.Errorf("x: %w", &hostsockets.HeldError{}), retryNever, ClassConflict, ReasonHeldByNode},
		{fmt.Errorf("x: %w", errHolderPending), retryAlways, ClassError, ""},
		{fmt.Errorf("x: %w", ErrInvalidPod), retryNever, ClassInvalid, ReasonInvalid},
		{fmt.Errorf("x: %w", ErrHyperV), retryNever, ClassHyperV, ReasonHyperV},
		{fmt.Errorf("x: %w", admission.ErrDenied), retryNever, ClassDenied, ReasonDenied},
		{&hcn.StepError{Step: hcn.StepAttachEndpoint, Err: hcn.ErrNotFound}, retryNever, ClassError, ""},
		{fmt.Errorf("x: %w", ErrSandboxNotFound), retryNever, ClassError, ""},
		{fmt.Errorf("x: %w", ErrNotSandbox), retryNever, "", ""},
		{ErrClosed, retryNever, ClassError, ""},
		{fmt.Errorf("x: %w", ErrUndecodableEvent), retryNever, "", ""},
		{ErrDeadline, retryNever, ClassDeadline, ReasonHNS},
	}
	for _, tt := range tests {
		k := kindOf(tt.err)
		if k.retry != tt.retry || k.class != tt.class || k.reason != tt.reason {
			t.Errorf("%v: retry %v, class %q, reason %q; want %v, %q, %q", tt.err, k.retry, k.class, k.reason, tt.retry, tt.class, tt.reason)
		}
	}
	if v := judge(Pod{ID: "s"}, hcn.ErrUnavailable, 1, true); v.again {
		t.Error("a closing core retries")
	}
	if !retries(errors.New("E_FAIL"), config.UnclassifiedAttempts-1) || retries(errors.New("E_FAIL"), config.UnclassifiedAttempts) {
		t.Errorf("an unclassified error is not tried exactly %d times", config.UnclassifiedAttempts)
	}
}

// containerd not answering is counted and told as containerd's failure,
// not as HNS's, and retried until it answers.
func TestContainerdUnreachableIsToldAsContainerds(t *testing.T) {
	rep := &reports{}
	f := newFixture(t, func(o *Options) { o.Reporter = rep }, retryEvery(5*time.Millisecond))
	p := f.sandbox("p", "8080:80")
	f.store.mu.Lock()
	f.store.failSandbox = fmt.Errorf("connecting to containerd at /run/containerd.sock: %w", ErrContainerd)
	f.store.mu.Unlock()
	done := make(chan error, 1)
	go func() { done <- f.startRetrying(p) }()
	eventually(t, "the pod counted as failing", func() bool { return len(f.core.Failing()) > 0 })
	if got := f.core.Failing(); got[ReasonContainerd] != 1 || len(got) != 1 {
		t.Fatalf("failing %v, want the pod under %s", got, ReasonContainerd)
	}
	got, ok := rep.last()
	if !ok || got.Mapped || got.Reason != ReasonContainerd || !strings.Contains(got.Err.Error(), "default/pod-p") {
		t.Fatalf("report %+v (sent %v), want the owners told %s naming the pod", got, ok, ReasonContainerd)
	}
	f.store.mu.Lock()
	f.store.failSandbox = nil
	f.store.mu.Unlock()
	if err := waitResult(t, done); err != nil || len(f.endpoints("p")) != 1 {
		t.Fatalf("once containerd answers: %v, endpoints %+v", err, f.endpoints("p"))
	}
}
