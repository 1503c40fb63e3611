package backoff

import (
	"context"
	"testing"
	"time"
)

func TestBackoffDoublesToTheCapAndResets(t *testing.T) {
	b := New(time.Millisecond, 4*time.Millisecond)
	var got []time.Duration
	for range 4 {
		got = append(got, b.Next())
		if !b.Wait(context.Background()) {
			t.Fatal("Wait returned false")
		}
	}
	want := []time.Duration{time.Millisecond, 2 * time.Millisecond, 4 * time.Millisecond, 4 * time.Millisecond}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("delays %v, want %v", got, want)
		}
	}
	b.Reset()
	if b.Next() != time.Millisecond {
		t.Fatalf("after Reset: %v", b.Next())
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if New(time.Hour, time.Hour).Wait(ctx) {
		t.Fatal("Wait on a done context must return false at once")
	}
}

// A wait takes its delay, jittered within [d, d·1.4).
func TestWaitTakesTheJitteredDelay(t *testing.T) {
	b := New(20*time.Millisecond, time.Second)
	start := time.Now()
	if !b.Wait(context.Background()) {
		t.Fatal("Wait returned false")
	}
	if took := time.Since(start); took < 20*time.Millisecond {
		t.Fatalf("waited %v, less than the delay", took)
	}
	if b.initial.Jitter != Jitter || Jitter <= 0 {
		t.Fatalf("jitter %v", b.initial.Jitter)
	}
}
