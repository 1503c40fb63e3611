package service

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// fakeSCM keeps the SCM's rule on handles (MS-SCMR RDeleteService): a
// deleted service is only marked; it is removed when its last handle
// closes, and until then Open still opens it.
type fakeSCM struct {
	installed, marked, running bool
	open                       int // handles open on the service
	stopAfter                  int // polls a stop takes
}

func (f *fakeSCM) Open(string) (Service, error) {
	if !f.installed {
		return nil, ErrNoService
	}
	f.open++
	return &fakeHandle{f: f}, nil
}

type fakeHandle struct {
	f      *fakeSCM
	closed bool
}

func (h *fakeHandle) Stopped() (bool, error) {
	if h.f.running && h.f.stopAfter == 0 {
		h.f.running = false
	}
	if h.f.stopAfter > 0 {
		h.f.stopAfter--
	}
	return !h.f.running, nil
}
func (h *fakeHandle) Stop() error   { return nil }
func (h *fakeHandle) Delete() error { h.f.marked = true; return nil }
func (h *fakeHandle) Close() error {
	if !h.closed {
		h.closed = true
		h.f.open--
		if h.f.open == 0 && h.f.marked {
			h.f.installed = false
		}
	}
	return nil
}

func waits(sleep func()) UninstallWaits {
	return UninstallWaits{StopPolls: 10, GonePolls: 5, Every: time.Millisecond, Sleep: func(time.Duration) { sleep() }}
}

// Issue 38: uninstall closes its own handle before it looks, so a service
// nobody else holds is gone when it returns; one another program holds is
// waited for while that program closes it; one held for good is said to
// be marked for deletion, with what to do, not reported removed.
func TestUninstallLeavesTheServiceGoneOrSaysWhoKeepsIt(t *testing.T) {
	tests := []struct {
		name       string
		running    bool
		heldPolls  int // polls another program's handle stays open; -1: for good
		wantMarked bool
	}{
		{"stopped, nobody else holds it", false, 0, false},
		{"running, nobody else holds it", true, 0, false},
		{"another program closes it meanwhile", false, 3, false},
		{"another program holds it", false, -1, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeSCM{installed: true, running: tc.running, stopAfter: 2}
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
			if tc.wantMarked {
				if !errors.Is(err, ErrMarkedForDelete) || !strings.Contains(err.Error(), "Services console") {
					t.Fatalf("Uninstall = %v, want ErrMarkedForDelete saying what holds it", err)
				}
				if other.Close(); f.installed {
					t.Fatal("the service outlived its last handle")
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
