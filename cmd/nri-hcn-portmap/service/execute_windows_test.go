//go:build windows

// The SCM glue (handler.Execute) driven through its channels as x/sys/svc
// drives it: under wine (make test-windows) and on a Windows host alike.
package service

import (
	"context"
	"testing"
	"time"

	"golang.org/x/sys/windows/svc"
)

// execute runs Execute with a run function that drains for a while after
// its context ends; it returns the request and status channels and a
// channel that closes when Execute returns.
func execute(t *testing.T, every time.Duration, drain <-chan struct{}) (chan<- svc.ChangeRequest, <-chan svc.Status, <-chan struct{}) {
	t.Helper()
	r := make(chan svc.ChangeRequest) // unbuffered, as x/sys's
	s := make(chan svc.Status, 64)
	done := make(chan struct{})
	h := &handler{every: every, run: func(ctx context.Context) error {
		<-ctx.Done()
		<-drain // in-flight HCN work finishing
		return nil
	}}
	go func() {
		defer close(done)
		h.Execute(nil, r, s)
	}()
	return r, s, done
}

// send delivers a control request as the SCM's handler does, and fails if
// nobody takes it (a guard against a hang, not a timing target).
func send(t *testing.T, r chan<- svc.ChangeRequest, c svc.Cmd) {
	t.Helper()
	select {
	case r <- svc.ChangeRequest{Cmd: c}:
	case <-time.After(10 * time.Second):
		t.Fatalf("control request %v was not taken: the SCM's handler would hang", c)
	}
}

func next(t *testing.T, s <-chan svc.Status) svc.Status {
	t.Helper()
	select {
	case st := <-s:
		return st
	case <-time.After(10 * time.Second):
		t.Fatal("no status reported")
		return svc.Status{}
	}
}

// Issue 24, 11: during a long drain the StopPending checkpoint advances
// with every report (the SCM gives up on a service whose checkpoint does
// not move within its wait hint), and the wait hint covers the interval.
func TestStopPendingCheckPointAdvances(t *testing.T) {
	drain := make(chan struct{})
	r, s, done := execute(t, time.Millisecond, drain)
	for st := next(t, s); st.State != svc.Running; st = next(t, s) {
	}
	send(t, r, svc.Stop)
	var last uint32
	for range 5 {
		st := next(t, s)
		if st.State != svc.StopPending || st.CheckPoint != last+1 || st.WaitHint == 0 {
			t.Fatalf("status %+v after checkpoint %d: want StopPending, checkpoint %d, a wait hint", st, last, last+1)
		}
		last = st.CheckPoint
	}
	close(drain)
	<-done
}

// Issue 24, 12: a control request that comes after Stop (the SCM
// interrogates a stopping service) is taken and answered with the state
// the service is in; before, the request loop had returned after Stop and
// x/sys/svc's handler blocked on the send.
func TestControlRequestsAfterStopAreAnswered(t *testing.T) {
	drain := make(chan struct{})
	r, s, done := execute(t, time.Hour, drain)
	for st := next(t, s); st.State != svc.Running; st = next(t, s) {
	}
	send(t, r, svc.Stop)
	if st := next(t, s); st.State != svc.StopPending {
		t.Fatalf("status %+v after Stop", st)
	}
	send(t, r, svc.Interrogate)
	if st := next(t, s); st.State != svc.StopPending {
		t.Fatalf("Interrogate while stopping answered %+v", st)
	}
	send(t, r, svc.Stop) // a second stop is taken too
	close(drain)
	<-done
}
