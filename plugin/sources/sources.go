// Package sources chooses and runs the pod event sources (NRI, containerd
// events, or both) and the periodic resync, and says whether the chosen one
// is connected.
package sources

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/config"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/containerd"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/nri"
	"github.com/sirupsen/logrus"
)

// Sources chooses and runs the event sources and the periodic resync. All
// sources feed one core whose operations are idempotent, so running NRI and
// containerd events together is correct.
type Sources struct {
	Mode   string // config.SourceNRI, config.SourceContainerd or config.SourceAuto
	NRI    *nri.Source
	Events *containerd.EventSource
	Resync *plugin.Resyncer
	// NRISocketExists tells auto mode whether to try NRI at all.
	NRISocketExists func() bool
	// RegistrationWait is how long auto mode waits for NRI to accept the
	// plugin before it falls back to containerd events.
	RegistrationWait time.Duration
	// EventsOnly makes auto mode use containerd events without trying NRI:
	// on Windows, where stock containerd (checked against v2.4.2) opens no
	// NRI socket and sends no NRI pod events.
	EventsOnly bool
	Log        *logrus.Entry
	// Chosen, when set, is told which source runs (for metrics).
	Chosen func(source string)

	chosen  atomic.Pointer[string] // what Run chose, for Health
	running atomic.Bool            // Run has started and not returned
}

// Running reports whether the sources' loops run (for liveness): Run has
// started and not returned.
func (s *Sources) Running(context.Context) error {
	if !s.running.Load() {
		return errors.New("the event sources are not running")
	}
	return nil
}

// New returns the sources for mode with this OS's defaults: auto mode tries
// NRI only when nriSocket exists, and on Windows not at all.
func New(mode string, n *nri.Source, events *containerd.EventSource, resync *plugin.Resyncer, nriSocket string, log *logrus.Entry) *Sources {
	return &Sources{Mode: mode, NRI: n, Events: events, Resync: resync, Log: log,
		NRISocketExists:  func() bool { _, err := os.Stat(nriSocket); return err == nil },
		RegistrationWait: config.NRIRegistrationWait,
		EventsOnly:       eventsOnly}
}

func (s *Sources) choose(mode string) {
	s.chosen.Store(&mode)
	if s.Chosen != nil {
		s.Chosen(mode)
	}
}

// Run runs until ctx ends.
func (s *Sources) Run(ctx context.Context) error {
	s.running.Store(true)
	defer s.running.Store(false)
	var wg sync.WaitGroup
	defer wg.Wait()
	if s.Resync != nil {
		wg.Go(func() { s.Resync.Run(ctx) })
	}
	switch s.Mode {
	case config.SourceNRI:
		s.choose(config.SourceNRI)
		s.Log.WithField("source", config.SourceNRI).Info("event source chosen")
		s.stopsBeside(ctx, &wg)
		return s.NRI.Run(ctx)
	case config.SourceContainerd:
		s.choose(config.SourceContainerd)
		s.Log.WithField("source", config.SourceContainerd).Info("event source chosen")
		return s.Events.Run(ctx)
	case config.SourceAuto:
		return s.auto(ctx)
	}
	return fmt.Errorf("unknown event source %q", s.Mode)
}

func (s *Sources) auto(ctx context.Context) error {
	if s.EventsOnly {
		s.choose(config.SourceContainerd)
		s.Log.WithFields(logrus.Fields{"source": config.SourceContainerd, "reason": "containerd sends no NRI pod events on Windows"}).
			Info("event source chosen")
		return s.Events.Run(ctx)
	}
	if s.NRISocketExists != nil && !s.NRISocketExists() {
		s.choose(config.SourceContainerd)
		s.Log.WithFields(logrus.Fields{"source": config.SourceContainerd, "reason": "no NRI socket"}).Info("event source chosen")
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
		s.choose(config.SourceContainerd)
		s.Log.WithFields(logrus.Fields{"source": config.SourceContainerd, "reason": "NRI did not accept the plugin within " + s.RegistrationWait.String()}).
			Info("event source chosen")
		return s.Events.Run(ctx)
	case <-ctx.Done():
		return <-errc
	}
	s.choose(config.SourceNRI)
	s.Log.WithField("source", config.SourceNRI).Info("event source chosen")
	var wg sync.WaitGroup
	defer wg.Wait()
	s.stopsBeside(nctx, &wg)
	err := <-errc
	ncancel()
	return err
}

// stopsBeside runs containerd's stop events beside NRI until ctx ends
// (containerd.EventSource.Stops: after a containerd restart, NRI sends no
// stop for the pods that lived through it).
func (s *Sources) stopsBeside(ctx context.Context, wg *sync.WaitGroup) {
	if s.Events == nil {
		return
	}
	stops := s.Events.Stops()
	wg.Go(func() { _ = stops.Run(ctx) })
}

// Health reports whether the chosen event source is connected.
func (s *Sources) Health(context.Context) error {
	switch s.chosen.Load() {
	case nil:
		return errors.New("no event source chosen yet")
	}
	switch *s.chosen.Load() {
	case config.SourceNRI:
		if !s.NRI.Connected() {
			return errors.New("not registered with the NRI runtime")
		}
	case config.SourceContainerd:
		if !s.Events.Live() {
			return errors.New("containerd event subscription is not live")
		}
	}
	return nil
}
