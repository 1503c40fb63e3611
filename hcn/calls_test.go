package hcn_test

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn/hcnsim"
)

// The calls' wrappers (calls.go): bounded, limited, instrumented.

func TestCallBoundedGivesUpWithoutLeaking(t *testing.T) {
	base := runtime.NumGoroutine()
	release := make(chan struct{})
	started, done := make(chan struct{}), make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-started; cancel() }() // the caller gives up while HNS works
	lim := hcn.NewLimiter(1)
	_, err := hcn.CallBounded(ctx, lim, "CreateEndpoint", func() (int, error) {
		defer close(done)
		close(started)
		<-release
		return 1, nil
	})
	if !errors.Is(err, context.Canceled) || !errors.Is(err, hcn.ErrTimeout) {
		t.Fatalf("err = %v, want context.Canceled and hcn.ErrTimeout", err)
	}
	if lim.InFlight() != 1 {
		t.Fatalf("the call still running inside HNS must keep its slot, in flight = %d", lim.InFlight())
	}
	close(release) // the late HNS answer arrives
	<-done
	deadlineSlot := time.Now().Add(5 * time.Second)
	for lim.InFlight() != 0 && time.Now().Before(deadlineSlot) {
		time.Sleep(time.Millisecond)
	}
	if lim.InFlight() != 0 {
		t.Fatal("the slot was not released when HNS answered")
	}
	// the goroutine can deliver into the buffered channel and exit
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > base && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > base {
		t.Errorf("%d goroutines, %d before: the late call leaked", n, base)
	}
}

func TestCallBoundedReturnsResult(t *testing.T) {
	v, err := hcn.CallBounded(context.Background(), nil, "x", func() (string, error) { return "ok", nil })
	if v != "ok" || err != nil {
		t.Fatalf("= %q, %v", v, err)
	}
	want := errors.New("boom")
	if _, err := hcn.CallBounded(context.Background(), nil, "x", func() (string, error) { return "", want }); !errors.Is(err, want) {
		t.Fatalf("err = %v", err)
	}
}

// A caller that has already given up starts no HNS call at all.
func TestCallBoundedStartsNothingForADoneContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	called := false
	_, err := hcn.CallBounded(ctx, nil, "CreateEndpoint", func() (int, error) { called = true; return 1, nil })
	if called || !errors.Is(err, hcn.ErrTimeout) {
		t.Fatalf("called = %v, err = %v", called, err)
	}
}

// countingService counts the calls in flight inside the wrapped service.
type countingService struct {
	hcn.Service
	now, peak atomic.Int32
}

func (c *countingService) ListEndpoints(ctx context.Context) ([]hcn.Endpoint, error) {
	n := c.now.Add(1)
	defer c.now.Add(-1)
	for {
		p := c.peak.Load()
		if n <= p || c.peak.CompareAndSwap(p, n) {
			break
		}
	}
	return c.Service.ListEndpoints(ctx)
}

func TestLimitedCapsCallsInFlight(t *testing.T) {
	sim := hcnsim.New()
	sim.SetLatency(5 * time.Millisecond)
	inner := &countingService{Service: sim}
	svc := hcn.Limited(inner, hcn.NewLimiter(3))
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			if _, err := svc.ListEndpoints(context.Background()); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if p := inner.peak.Load(); p != 3 {
		t.Fatalf("peak calls in flight = %d, want 3", p)
	}
}

func TestLimitedWaitsOnlyAsLongAsTheCaller(t *testing.T) {
	sim := hcnsim.New()
	sim.SetLatency(time.Second)
	lim := hcn.NewLimiter(1)
	svc := hcn.Limited(sim, lim)
	go func() { _, _ = svc.ListEndpoints(context.Background()) }() // holds the only slot
	for lim.InFlight() == 0 {
		time.Sleep(time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	_, err := svc.ListEndpoints(ctx)
	if !errors.Is(err, hcn.ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want a timeout waiting for a slot", err)
	}
}

// One timeout is one ErrTimeout, named once.
func TestBoundedTimeoutIsTypedAndWrappedOnce(t *testing.T) {
	sim := hcnsim.New()
	sim.SetLatency(time.Second)
	_, err := hcn.Bounded(hcn.Limited(sim, hcn.NewLimiter(1)), 20*time.Millisecond).CreateEndpoint(context.Background(), hcn.EndpointSpec{Name: "x"})
	if !errors.Is(err, hcn.ErrTimeout) {
		t.Fatalf("err = %v", err)
	}
	if n := strings.Count(err.Error(), hcn.ErrTimeout.Error()); n != 1 {
		t.Fatalf("%q names the timeout %d times", err, n)
	}
}

// Regression (load and faults, 8): the /healthz probe of HNS was counted in
// the HNS latency metrics, skewing the latency of the real work.
func TestHealthProbeIsNotObserved(t *testing.T) {
	var calls []string
	svc := hcn.Instrumented(hcnsim.New(), func(call string, _ time.Duration, _ error) { calls = append(calls, call) })
	mgr := newManager(svc, hcn.ManagerConfig{CreateNetwork: true, Network: hcn.NetworkSpec{Name: "nat", Type: hcn.NetworkNAT}})
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

// A not-found answer is HNS answering (the plugin asks for what may be
// gone on purpose): counted as a call, not as a failed one; any other
// error is a failure (issue 47).
func TestANotFoundAnswerIsNotAFailedCall(t *testing.T) {
	type call struct {
		name   string
		failed error
	}
	var calls []call
	sim := hcnsim.New()
	svc := hcn.Instrumented(sim, func(name string, _ time.Duration, err error) { calls = append(calls, call{name, err}) })
	ctx := context.Background()
	if _, err := svc.GetNetworkByName(ctx, "nowhere"); !errors.Is(err, hcn.ErrNotFound) {
		t.Fatalf("GetNetworkByName of no network = %v, want not found", err)
	}
	if len(calls) != 1 || calls[0].name != "GetNetworkByName" || calls[0].failed != nil {
		t.Fatalf("observed %+v, want one GetNetworkByName, not failed", calls)
	}
	if err := sim.InjectFault(hcnsim.Fault{Op: "CreateNetwork", Kind: "unavailable"}); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.CreateNetwork(ctx, hcn.NetworkSpec{Name: "nat", Type: hcn.NetworkNAT}); err == nil {
		t.Fatal("the injected fault did not fail the call")
	}
	if len(calls) != 2 || calls[1].failed == nil {
		t.Fatalf("observed %+v, want the second call failed", calls)
	}
}
