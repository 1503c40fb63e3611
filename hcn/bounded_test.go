package hcn

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"
)

func TestCallBoundedGivesUpWithoutLeaking(t *testing.T) {
	base := runtime.NumGoroutine()
	release := make(chan struct{})
	started, done := make(chan struct{}), make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-started; cancel() }() // the caller gives up while HNS works
	lim := NewLimiter(1)
	_, err := callBounded(ctx, lim, "CreateEndpoint", func() (int, error) {
		defer close(done)
		close(started)
		<-release
		return 1, nil
	})
	if !errors.Is(err, context.Canceled) || !errors.Is(err, ErrTimeout) {
		t.Fatalf("err = %v, want context.Canceled and ErrTimeout", err)
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
	v, err := callBounded(context.Background(), nil, "x", func() (string, error) { return "ok", nil })
	if v != "ok" || err != nil {
		t.Fatalf("= %q, %v", v, err)
	}
	want := errors.New("boom")
	if _, err := callBounded(context.Background(), nil, "x", func() (string, error) { return "", want }); !errors.Is(err, want) {
		t.Fatalf("err = %v", err)
	}
}

// A caller that has already given up starts no HNS call at all.
func TestCallBoundedStartsNothingForADoneContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	called := false
	_, err := callBounded(ctx, nil, "CreateEndpoint", func() (int, error) { called = true; return 1, nil })
	if called || !errors.Is(err, ErrTimeout) {
		t.Fatalf("called = %v, err = %v", called, err)
	}
}
