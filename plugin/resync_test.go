package plugin

import (
	"context"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
)

// recordingObserver counts reconcile runs by trigger.
type recordingObserver struct {
	nopObserver
	runs chan string
}

func (o recordingObserver) Reconciled(trigger string, _, _, _, _ int) { o.runs <- trigger }

// Regression (load and faults, 3): resyncs were never merged, so a flapping
// containerd stacked full reconciles. Requests made while one runs make
// exactly one more run, however many there are.
func TestResyncRequestsAreMerged(t *testing.T) {
	f := newFixture(t)
	obs := recordingObserver{runs: make(chan string, 100)}
	f.core.opt.Observer = obs
	r := NewResyncer(f.core, 0, logrus.NewEntry(logrus.New()))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// the first resync is held up by a slow containerd listing
	release := make(chan struct{})
	listed := make(chan struct{}, 10)
	f.store.onList = func() { listed <- struct{}{}; <-release }
	go r.Run(ctx)
	r.Trigger("subscribed")
	select { // it runs
	case <-listed:
	case <-time.After(10 * time.Second):
		t.Fatal("the triggered resync never listed the sandboxes")
	}
	for range 20 {
		r.Trigger("subscribed") // containerd flaps
	}
	close(release)
	for want := range 2 {
		select {
		case <-obs.runs:
		case <-time.After(10 * time.Second):
			t.Fatalf("resync %d never ran", want+1)
		}
	}
	select { // and no third, over a window
	case trig := <-obs.runs:
		t.Fatalf("a third resync ran (%s): requests were not merged", trig)
	case <-time.After(300 * time.Millisecond):
	}
}
