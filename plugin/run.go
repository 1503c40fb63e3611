package plugin

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"
)

// Source modes.
const (
	ModeNRI        = "nri"
	ModeContainerd = "containerd"
	ModeAuto       = "auto"
)

// Sources chooses and runs the event sources and the periodic resync. All
// sources feed one core whose operations are idempotent, so running NRI and
// containerd events together is correct.
type Sources struct {
	Mode   string
	NRI    *NRISource
	Events *EventSource
	Resync *Resyncer
	// NRISocketExists tells auto mode whether to try NRI at all.
	NRISocketExists func() bool
	// RegistrationWait is how long auto mode waits for NRI to accept the
	// plugin before it falls back to containerd events.
	RegistrationWait time.Duration
	// EventsWithNRI runs containerd events even when NRI was chosen in auto
	// mode: on Windows stock containerd accepts NRI plugins but never sends
	// them pod events.
	EventsWithNRI bool
	Log           *logrus.Entry

	chosen atomic.Pointer[string] // what Run chose, for Health
}

func (s *Sources) choose(mode string) {
	s.chosen.Store(&mode)
}

// Run runs until ctx ends.
func (s *Sources) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	if s.Resync != nil {
		wg.Go(func() { s.Resync.Run(ctx) })
	}
	switch s.Mode {
	case ModeNRI:
		s.choose(ModeNRI)
		s.Log.WithField("source", ModeNRI).Info("event source chosen")
		return s.NRI.Run(ctx)
	case ModeContainerd:
		s.choose(ModeContainerd)
		s.Log.WithField("source", ModeContainerd).Info("event source chosen")
		return s.Events.Run(ctx)
	case ModeAuto:
		return s.auto(ctx)
	}
	return fmt.Errorf("unknown event source %q", s.Mode)
}

func (s *Sources) auto(ctx context.Context) error {
	if s.NRISocketExists != nil && !s.NRISocketExists() {
		s.choose(ModeContainerd)
		s.Log.WithFields(logrus.Fields{"source": ModeContainerd, "reason": "no NRI socket"}).Info("event source chosen")
		return s.Events.Run(ctx)
	}
	nctx, ncancel := context.WithCancel(ctx)
	defer ncancel()
	errc := make(chan error, 1)
	go func() { errc <- s.NRI.Run(nctx) }()
	select {
	case <-s.NRI.Registered():
	case <-time.After(s.RegistrationWait):
		ncancel()
		<-errc
		s.choose(ModeContainerd)
		s.Log.WithFields(logrus.Fields{"source": ModeContainerd, "reason": "NRI did not accept the plugin within " + s.RegistrationWait.String()}).
			Info("event source chosen")
		return s.Events.Run(ctx)
	case <-ctx.Done():
		return <-errc
	}
	if !s.EventsWithNRI {
		s.choose(ModeNRI)
		s.Log.WithField("source", ModeNRI).Info("event source chosen")
		return <-errc
	}
	s.choose("nri+containerd")
	s.Log.WithFields(logrus.Fields{"source": "nri+containerd", "reason": "containerd sends no NRI pod events on Windows"}).
		Info("event source chosen")
	eerr := s.Events.Run(ctx)
	if nerr := <-errc; nerr != nil {
		return nerr
	}
	return eerr
}
