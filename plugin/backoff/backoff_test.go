package backoff

import (
	"fmt"

	"context"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/config"
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

// The work queues' retry rule is the same curve: a key's delays double
// from min to max, each jittered within [d, d·1.4), and start over once
// the key is forgotten; and the queue as a whole is held to
// config.RetriesPerSecond after a burst of config.RetryBurst, whatever
// each key's own delay.
func TestAQueueRetriesOnTheSameCurveAndAtABoundedRate(t *testing.T) {
	lim := QueueLimiter(10*time.Millisecond, 40*time.Millisecond)
	for i, base := range []time.Duration{10, 20, 40, 40} {
		d := lim.When("a")
		lo, hi := base*time.Millisecond, time.Duration(float64(base*time.Millisecond)*(1+Jitter))
		if d < lo || d >= hi {
			t.Fatalf("retry %d of a: %v, want within [%v, %v)", i+1, d, lo, hi)
		}
	}
	if n := lim.NumRequeues("a"); n != 4 {
		t.Fatalf("NumRequeues = %d, want 4", n)
	}
	lim.Forget("a")
	if d := lim.When("a"); d >= time.Duration(float64(10*time.Millisecond)*(1+Jitter)) {
		t.Fatalf("after Forget: %v, want the first delay again", d)
	}
	// the whole queue: past the burst, each new key's first retry waits
	// for the bucket, however short its own delay
	lim = QueueLimiter(time.Millisecond, time.Millisecond)
	var last time.Duration
	for i := range config.RetryBurst + 5 {
		last = lim.When(fmt.Sprint("key-", i))
	}
	if want := 4 * time.Second / config.RetriesPerSecond; last < want {
		t.Fatalf("the %dth key's first retry waits %v, want at least %v: the queue's retries are not bounded", config.RetryBurst+5, last, want)
	}
}

// The jitter spreads the retries over their window: of many first
// delays, none is below the delay and some are in the upper half of
// [d, d·(1+Jitter)) (a rule that always waits d, the bottom of the window,
// fails); and the cap clamps: with a cap the doubling would pass (10, 20,
// 40 against 30), the third delay and every one after is within the
// cap's window, [30, 30·(1+Jitter)), never the doubling's. Both rules,
// the queue's and the reconnect loops'.
func TestARetrySpreadsOverItsWindowAndTheCapClamps(t *testing.T) {
	const base, cap = 10 * time.Millisecond, 30 * time.Millisecond
	window := func(d time.Duration) (time.Duration, time.Duration) {
		return d, time.Duration(float64(d) * (1 + Jitter))
	}
	for _, rule := range []struct {
		name string
		// delays are the first n delays of a fresh key (or loop)
		delays func(n int) []time.Duration
	}{
		{"queue", func(n int) []time.Duration {
			lim := QueueLimiter(base, cap)
			var out []time.Duration
			for range n {
				out = append(out, lim.When("a"))
			}
			return out
		}},
		{"reconnect", func(n int) []time.Duration {
			b := New(base, cap)
			var out []time.Duration
			for range n {
				out = append(out, b.cur.Step())
			}
			return out
		}},
	} {
		t.Run(rule.name, func(t *testing.T) {
			lo, hi := window(base)
			upper := 0
			for range 200 {
				d := rule.delays(1)[0]
				if d < lo || d >= hi {
					t.Fatalf("a first delay of %v, want within [%v, %v)", d, lo, hi)
				}
				if d >= lo+(hi-lo)/2 {
					upper++
				}
			}
			if upper == 0 {
				t.Fatalf("none of 200 first delays in the upper half of [%v, %v): the retries are not spread", lo, hi)
			}
			for i, d := range rule.delays(6)[2:] {
				if lo, hi := window(cap); d < lo || d >= hi {
					t.Fatalf("delay %d: %v, want clamped to the cap's window [%v, %v)", i+3, d, lo, hi)
				}
			}
		})
	}
}
