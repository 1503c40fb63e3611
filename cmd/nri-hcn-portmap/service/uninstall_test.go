package service

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// fakeSCM keeps the SCM's rules on deletion (MS-SCMR RDeleteService,
// DeleteService's documentation): a deleted service is only marked; it is
// removed when its last handle closes and it is not running. Until then
// Open still opens it, a second Delete and a create of its name fail with
// 1072 (ErrMarkedForDelete), and a change of its configuration says it is
// marked (Marked).
type fakeSCM struct {
	installed, marked, running bool
	// no1072: the SCM answers no 1072 to a change of a marked service's
	// configuration (an SCM that would answer the change that changes
	// nothing without asking): the start type, which DeleteService sets
	// to disabled, says it alone
	no1072    bool
	stopping  bool
	open      int // handles open on the service
	stopAfter int // State polls a stop takes once asked; -1: never
}

func (f *fakeSCM) Open(string) (Service, error) {
	if !f.installed {
		return nil, ErrNoService
	}
	f.open++
	return &fakeHandle{f: f}, nil
}

func (f *fakeSCM) Create(Plan) (Service, error) {
	switch {
	case f.installed && f.marked:
		return nil, ErrMarkedForDelete
	case f.installed:
		return nil, errors.New("The specified service already exists (1073)")
	}
	f.installed = true
	f.open++
	return &fakeHandle{f: f}, nil
}

// removeIfDone removes a marked service nobody holds and that does not run.
func (f *fakeSCM) removeIfDone() {
	if f.marked && f.open == 0 && !f.running {
		f.installed, f.marked = false, false
	}
}

type fakeHandle struct {
	f      *fakeSCM
	closed bool
}

func (h *fakeHandle) State() (string, error) {
	f := h.f
	if f.running && f.stopping {
		if f.stopAfter == 0 {
			f.running = false
			f.removeIfDone()
		} else if f.stopAfter > 0 {
			f.stopAfter--
		}
	}
	switch {
	case !f.running:
		return StateStopped, nil
	case f.stopping:
		return "stop-pending", nil
	}
	return "running", nil
}

// Marked reads the two signals as the SCM gives them: a deleted service's
// start type is disabled, and a change of its configuration answers 1072
// (unless no1072).
func (h *fakeHandle) Marked() (string, error) {
	var answer error
	if h.f.marked && !h.f.no1072 {
		answer = ErrMarkedForDelete
	}
	return markedBy(h.f.marked, answer)
}
func (h *fakeHandle) Stop() error {
	h.f.stopping = h.f.running
	return nil
}

func (h *fakeHandle) Delete() error {
	if h.f.marked {
		return ErrMarkedForDelete
	}
	h.f.marked = true
	return nil
}

func (h *fakeHandle) Close() error {
	if !h.closed {
		h.closed = true
		h.f.open--
		h.f.removeIfDone()
	}
	return nil
}

func waits(sleep func()) UninstallWaits {
	return UninstallWaits{StopPolls: 10, GonePolls: 5, Every: time.Millisecond, Sleep: func(time.Duration) { sleep() }}
}

// Uninstall closes its own handle before it looks, so a service nobody
// else holds is gone when it returns; one another program holds is
// waited for while that program closes it; one held for good is said to
// be marked for deletion, with what to do; one that does not stop in time
// is said not to have stopped, with its state, not blamed on another
// program (issues 38, 47).
func TestUninstallLeavesTheServiceGoneOrSaysWhatKeepsIt(t *testing.T) {
	tests := []struct {
		name      string
		running   bool
		stopAfter int
		heldPolls int    // polls another program's handle stays open; -1: for good
		want      error  // nil: gone
		says      string // and the message says
		never     string // and does not say
	}{
		{"stopped, nobody else holds it", false, 0, 0, nil, "", ""},
		{"running, nobody else holds it", true, 2, 0, nil, "", ""},
		{"another program closes it meanwhile", false, 0, 3, nil, "", ""},
		{"another program holds it", false, 0, -1, ErrMarkedForDelete, "Services console", "has not stopped"},
		{"it does not stop in time", true, -1, 0, ErrNotStopped, "has not stopped (its state: stop-pending)", "Services console"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeSCM{installed: true, running: tc.running, stopAfter: tc.stopAfter}
			var other Service
			if tc.heldPolls != 0 {
				other, _ = f.Open("svc")
			}
			polls := 0
			err := UninstallFrom(f, "svc", waits(func() {
				polls++
				if polls == tc.heldPolls {
					other.Close()
				}
			}))
			if tc.want != nil {
				if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.says) || strings.Contains(err.Error(), tc.never) {
					t.Fatalf("Uninstall = %v, want %v saying %q, not %q", err, tc.want, tc.says, tc.never)
				}
				if !f.installed || !f.marked {
					t.Fatalf("installed=%v marked=%v: want it kept, marked, while held or running", f.installed, f.marked)
				}
				return
			}
			if err != nil {
				t.Fatalf("Uninstall = %v", err)
			}
			if f.installed || f.open != 0 || f.running {
				t.Fatalf("after Uninstall: installed=%v, %d handles open, running=%v; want gone", f.installed, f.open, f.running)
			}
			if _, err := f.Open("svc"); !errors.Is(err, ErrNoService) {
				t.Fatalf("Open after Uninstall = %v, want ErrNoService", err)
			}
		})
	}
	if err := UninstallFrom(&fakeSCM{}, "svc", waits(func() {})); !errors.Is(err, ErrNoService) {
		t.Fatalf("Uninstall of no service = %v, want ErrNoService", err)
	}
}

// A second uninstall of a service still marked says so, not a raw 1072
// from DeleteService, and leaves it as it is.
func TestARepeatUninstallSaysTheServiceIsAlreadyMarked(t *testing.T) {
	f := &fakeSCM{installed: true}
	other, _ := f.Open("svc") // the Services console
	if err := UninstallFrom(f, "svc", waits(func() {})); !errors.Is(err, ErrMarkedForDelete) {
		t.Fatalf("first uninstall: %v", err)
	}
	err := UninstallFrom(f, "svc", waits(func() {}))
	if !errors.Is(err, ErrMarkedForDelete) || !strings.Contains(err.Error(), "already marked for deletion by an earlier uninstall") ||
		!strings.Contains(err.Error(), "close services.msc") {
		t.Fatalf("repeat uninstall: %v", err)
	}
	if other.Close(); f.installed {
		t.Fatal("the service outlived its last handle")
	}
}

// Install says what the SCM has under the name: nothing (installed), a
// service (uninstall it first), one marked for deletion that another
// program holds (close it, or reboot) or that still runs (its state),
// found by asking the service, as OpenService opens a marked one.
func TestInstallSaysWhatTheSCMHas(t *testing.T) {
	plan := Plan{Name: "svc"}
	for _, tc := range []struct {
		name string
		scm  *fakeSCM
		want error
		says string
	}{
		{"nothing there", &fakeSCM{}, nil, ""},
		{"installed", &fakeSCM{installed: true}, ErrExists, "uninstall it first"},
		{"marked, held by the Services console", &fakeSCM{installed: true, marked: true, open: 1}, ErrMarkedForDelete, "close services.msc"},
		{"marked, still running", &fakeSCM{installed: true, marked: true, running: true}, ErrMarkedForDelete, "has not stopped yet (its state: running)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := InstallOn(tc.scm, plan)
			if tc.want == nil {
				if err != nil || !tc.scm.installed || tc.scm.open != 0 {
					t.Fatalf("InstallOn = %v, installed=%v, %d handles open", err, tc.scm.installed, tc.scm.open)
				}
				return
			}
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("InstallOn = %v, want %v saying %q", err, tc.want, tc.says)
			}
			if strings.Contains(err.Error(), "already exists") != (tc.want == ErrExists) {
				t.Fatalf("InstallOn = %v: 'already exists' only for a service that is not marked", err)
			}
		})
	}
}

// The SCM keeps a deleted service while it runs: it goes once it stops
// and nobody holds it (the fake's rule, which the uninstall above relies
// on).
func TestAMarkedServiceStaysUntilItStops(t *testing.T) {
	f := &fakeSCM{installed: true, running: true, stopAfter: 1}
	s, _ := f.Open("svc")
	if err := s.Delete(); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if !f.installed {
		t.Fatal("a running service was removed when its last handle closed")
	}
	s, _ = f.Open("svc")
	s.Stop()
	for st, _ := s.State(); st != StateStopped; st, _ = s.State() {
	}
	s.Close()
	if f.installed {
		t.Fatal("a stopped, marked service nobody holds is still there")
	}
}

// The sequence of TestServiceUnderTheSCM (service_windows_test.go, on a
// Windows host) against the fake: the test's own handle is closed before
// it looks for the service, or the SCM would still have it.
func TestTheSCMTestsSequenceHoldsUnderTheHandleRule(t *testing.T) {
	f := &fakeSCM{installed: true}
	s, _ := f.Open("svc") // the test's handle, to read config and start it
	s.Close()
	if err := UninstallFrom(f, "svc", waits(func() {})); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Open("svc"); !errors.Is(err, ErrNoService) {
		t.Fatalf("service still there after Uninstall: %v", err)
	}
}

// Issue 53: a service marked for deletion is recognised by either signal
// the SCM gives, and the refusal says which it saw: the start type
// DeleteService sets (MS-SCMR 3.1.4.3), the 1072 a change of its
// configuration gets (a client like ReactOS's answers success for the
// NULL change without asking: the start type alone then says it).
func TestAMarkedServiceIsKnownByEitherSignal(t *testing.T) {
	for _, tc := range []struct {
		name     string
		disabled bool
		answer   error
		says     string // "": not marked
	}{
		{"both signals", true, ErrMarkedForDelete, "start type is disabled, as deleting a service sets it; the service control manager answers 1072"},
		{"the start type alone", true, nil, "start type is disabled"},
		{"the start type, the change failing otherwise", true, errors.New("access denied"), "start type is disabled"},
		{"1072 alone", false, ErrMarkedForDelete, "answers 1072"},
		{"neither", false, nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			seen, err := markedBy(tc.disabled, tc.answer)
			if err != nil || !strings.Contains(seen, tc.says) || (tc.says == "") != (seen == "") {
				t.Fatalf("markedBy = %q, %v; want %q", seen, err, tc.says)
			}
		})
	}
	if _, err := markedBy(false, errors.New("access denied")); err == nil {
		t.Error("a failed look with no signal is no answer")
	}
	f := &fakeSCM{installed: true, marked: true, no1072: true}
	err := InstallOn(f, Plan{Name: "svc"})
	if !errors.Is(err, ErrMarkedForDelete) || !strings.Contains(err.Error(), "start type is disabled") {
		t.Fatalf("install over a marked service the SCM answers no 1072 for: %v", err)
	}
}

// Issue 55: the DaemonSet's init step refuses a node where the plugin's
// service is installed, running or stopped, naming its state and the
// fix; a node without it passes.
func TestTheDaemonSetRefusesANodeWithTheService(t *testing.T) {
	for _, tc := range []struct {
		name string
		scm  *fakeSCM
		want string // "" where it passes
	}{
		{"no service", &fakeSCM{}, ""},
		{"the service running", &fakeSCM{installed: true, running: true}, "nri-hcn-portmap (running)"},
		{"the service stopped", &fakeSCM{installed: true}, "nri-hcn-portmap (stopped)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := AbsentFrom(tc.scm, Name)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("%v, want nothing said", err)
				}
				return
			}
			if !errors.Is(err, ErrServiceInstalled) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "service uninstall") {
				t.Fatalf("%v, want ErrServiceInstalled naming %q and how to uninstall it", err, tc.want)
			}
			if tc.scm.open != 0 {
				t.Errorf("%d handles left open on the service", tc.scm.open)
			}
		})
	}
}
