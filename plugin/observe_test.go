package plugin

import (
	"sync"
	"testing"
	"time"
)

// mappedTimes records start-to-mapped observations.
type mappedTimes struct {
	nopObserver
	mu  sync.Mutex
	got []string // path per observation
}

func (m *mappedTimes) Mapped(path string, d time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.got = append(m.got, path) // d may be 0 where the clock is coarse (wine)
}

func (m *mappedTimes) paths() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.got...)
}

// Issue 32: a pod's start-to-mapped latency is observed once, by the path
// its start came by, when its host ports are first in place: not for a
// pod with nothing to map, not again when its endpoint is rebuilt.
func TestStartToMappedIsObservedOnce(t *testing.T) {
	obs := &mappedTimes{}
	f := newFixture(t, func(o *Options) { o.Observer = obs })
	if err := f.core.StartPod(ctx, f.sandbox("web", "8080:80")); err != nil {
		t.Fatal(err)
	}
	if err := f.core.StartPod(ctx, f.sandbox("plain", "")); err != nil {
		t.Fatal(err)
	}
	if err := startedAndWait(t, f, f.eventPod("ev", "8081:80")); err != nil {
		t.Fatal(err)
	}
	if got := obs.paths(); len(got) != 2 || got[0] != PathNRI || got[1] != PathEvents {
		t.Fatalf("observed %v, want [nri events]", got)
	}
	// HNS loses the endpoints (a restart): rebuilt, not observed again
	f.sim.RestartHNS()
	if _, err := f.core.ReconcileAll(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, "web's endpoint rebuilt", func() bool { return len(f.endpoints("web")) == 1 })
	if got := obs.paths(); len(got) != 2 {
		t.Fatalf("observed %v after a rebuild, want the 2 first mappings only", got)
	}
}
