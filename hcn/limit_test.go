package hcn_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn/hcnsim"
)

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
