package service

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// testDir is t.TempDir without failing on cleanup: under wine, Go's
// RemoveAll of a temp dir fails ("Invalid function").
func testDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "svc-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(d) })
	return d
}

func TestInstallPlan(t *testing.T) {
	dir := testDir(t)
	cfg := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(cfg, []byte("[hcn]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(dir, "nri-hcn-portmap.exe")
	installed := func(s string) bool { return s == "containerd" }
	p, err := InstallPlan(exe, cfg, nil, installed)
	if err != nil {
		t.Fatal(err)
	}
	if p.Name != Name || p.Exe != exe || !reflect.DeepEqual(p.Args, []string{"run", "--config", cfg}) {
		t.Errorf("plan = %+v", p)
	}
	if len(p.Recovery) != 3 || !p.Recovery[0].Restart || p.Recovery[0].Delay != 5*time.Second || p.ResetPeriod != 24*time.Hour {
		t.Errorf("recovery = %+v, reset %s", p.Recovery, p.ResetPeriod)
	}
	if len(p.Dependencies) != 0 {
		t.Errorf("dependencies = %v, want none by default (the plugin retries containerd itself)", p.Dependencies)
	}
	if p, err := InstallPlan(exe, cfg, []string{"containerd"}, installed); err != nil || !reflect.DeepEqual(p.Dependencies, []string{"containerd"}) {
		t.Errorf("--depends-on containerd: %+v, %v", p, err)
	}
	if _, err := InstallPlan(exe, cfg, []string{"rke2"}, installed); err == nil ||
		err.Error() != `service install: --depends-on "rke2": no service of that name is installed` {
		t.Errorf("a dependency that is not installed: %v", err)
	}
	if p, err := InstallPlan(exe, "", nil, installed); err != nil || !reflect.DeepEqual(p.Args, []string{"run"}) {
		t.Errorf("without config: %+v, %v", p, err)
	}
	for _, tt := range []struct{ exe, cfg, want string }{
		{"nri-hcn-portmap.exe", cfg, "must be absolute"},
		{exe, "config.toml", `--config "config.toml": the path must be absolute`},
		{exe, filepath.Join(dir, "missing.toml"), "missing.toml"},
	} {
		if _, err := InstallPlan(tt.exe, tt.cfg, nil, installed); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("InstallPlan(%q, %q) = %v, want %q", tt.exe, tt.cfg, err, tt.want)
		}
	}
}

type recorder struct {
	mu     sync.Mutex
	states []State
}

func (r *recorder) report(s State) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.states = append(r.states, s)
}

func (r *recorder) got() []State {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]State(nil), r.states...)
}

func TestHandleStopWaitsForInFlightWork(t *testing.T) {
	reqs := make(chan Request)
	var rec recorder
	finished := make(chan struct{})
	reloads := 0
	run := func(ctx context.Context) error {
		<-ctx.Done()
		time.Sleep(20 * time.Millisecond) // in-flight HCN work finishing
		close(finished)
		return ctx.Err()
	}
	codeC := make(chan uint32)
	go func() { codeC <- Handle(reqs, rec.report, run, func() { reloads++ }) }()
	reqs <- ParamChange
	reqs <- Interrogate
	reqs <- Stop
	code := <-codeC
	select {
	case <-finished:
	default:
		t.Fatal("Stopped was reported before the work finished")
	}
	want := []State{StartPending, Running, Running, StopPending} // Stopped comes from the SCM glue, with the code
	if !reflect.DeepEqual(rec.got(), want) || code != 0 || reloads != 1 {
		t.Fatalf("states %v, code %d, reloads %d; want %v, 0, 1", rec.got(), code, reloads, want)
	}
}

func TestHandleReportsFailureForRecovery(t *testing.T) {
	reqs := make(chan Request)
	var rec recorder
	code := Handle(reqs, rec.report, func(context.Context) error { return errors.New("containerd unreachable") }, nil)
	if code == 0 || !reflect.DeepEqual(rec.got(), []State{StartPending, Running}) {
		t.Fatalf("code %d, states %v: a failed run must exit non-zero so the SCM restarts it", code, rec.got())
	}
	// an operator's stop exits 0 even when finishing failed (run logs
	// it): a non-zero code would make the recovery actions restart a
	// service someone stopped
	go func() { reqs <- Shutdown }()
	code = Handle(reqs, func(State) {}, func(ctx context.Context) error { <-ctx.Done(); return errors.New("rollback failed") }, nil)
	if code != 0 {
		t.Fatalf("code %d after an operator's stop", code)
	}
}

// Regression (load and faults, 7): a stop reported StopPending once, with
// no progress, while it could wait a minute on removals; the SCM gives up
// on a service whose checkpoint does not move.
func TestHandleReportsStopProgress(t *testing.T) {
	reqs := make(chan Request)
	var rec recorder
	stopping := func() int {
		n := 0
		for _, s := range rec.got() {
			if s == StopPending {
				n++
			}
		}
		return n
	}
	run := func(ctx context.Context) error {
		<-ctx.Done()
		for stopping() < 4 { // in-flight work that takes a while
			time.Sleep(time.Millisecond)
		}
		return ctx.Err()
	}
	codeC := make(chan uint32)
	go func() { codeC <- HandleWith(reqs, rec.report, run, nil, time.Millisecond) }()
	reqs <- Stop
	if code := <-codeC; code != 0 {
		t.Fatalf("code %d", code)
	}
	if got := rec.got(); stopping() < 4 || slices.Contains(got, Stopped) {
		t.Fatalf("states %v: want repeated StopPending, and Stopped left to the SCM glue", got)
	}
}

// Issue 15: the SCM is told Running while the plugin is still waiting for
// HNS (trigger-started at boot, it can take long to answer): the building
// happens inside run, after Running. Also runs as a Windows binary under
// wine.
func TestRunningIsReportedBeforeHNSAnswers(t *testing.T) {
	reqs := make(chan Request)
	var rec recorder
	hnsAnswers := make(chan struct{})
	building := make(chan struct{})
	run := func(ctx context.Context) error {
		close(building)
		select { // waiting for HNS, as buildRetrying does
		case <-hnsAnswers:
		case <-ctx.Done():
			return ctx.Err()
		}
		<-ctx.Done()
		return nil
	}
	codeC := make(chan uint32)
	go func() { codeC <- Handle(reqs, rec.report, run, nil) }()
	<-building
	for !slices.Contains(rec.got(), Running) {
		time.Sleep(time.Millisecond) // Handle reports Running right after starting run
	}
	close(hnsAnswers) // HNS answers only after the SCM heard Running
	reqs <- Stop
	if code := <-codeC; code != 0 {
		t.Fatalf("code %d", code)
	}
	if got := rec.got(); !reflect.DeepEqual(got[:2], []State{StartPending, Running}) {
		t.Fatalf("states %v", got)
	}
}
