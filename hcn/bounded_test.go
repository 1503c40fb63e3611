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
	done := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // the caller has already given up
	_, err := callBounded(ctx, "CreateEndpoint", func() (int, error) {
		defer close(done)
		<-release
		return 1, nil
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	close(release) // the late HNS answer arrives
	<-done
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
	v, err := callBounded(context.Background(), "x", func() (string, error) { return "ok", nil })
	if v != "ok" || err != nil {
		t.Fatalf("= %q, %v", v, err)
	}
	want := errors.New("boom")
	if _, err := callBounded(context.Background(), "x", func() (string, error) { return "", want }); !errors.Is(err, want) {
		t.Fatalf("err = %v", err)
	}
}
