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

func TestJitterSpreadsAroundTheDelay(t *testing.T) {
	for _, tt := range []struct {
		r    float64
		want time.Duration
	}{{0, 800 * time.Millisecond}, {0.5, time.Second}, {0.999, 1199600 * time.Microsecond}} {
		if got := jittered(time.Second, tt.r); got != tt.want {
			t.Errorf("jittered(1s, %v) = %v, want %v", tt.r, got, tt.want)
		}
	}
}
