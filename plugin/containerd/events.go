package containerd

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/config"

	apievents "github.com/containerd/containerd/api/events"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/typeurl/v2"
	"github.com/sirupsen/logrus"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/backoff"
)

// Topics the event source acts on.
const (
	TopicTaskStart       = "/tasks/start"
	TopicTaskExit        = "/tasks/exit"
	TopicTaskDelete      = "/tasks/delete"
	TopicContainerDelete = "/containers/delete"
	// TopicProbe is published by the plugin itself to learn when its
	// subscription is live.
	TopicProbe = "/nri-hcn-portmap/subscribed"
)

// EventSource drives the core from containerd's event stream, which stock
// containerd emits on Windows although it sends no NRI pod events there.
// When the stream breaks it resubscribes with backoff and resyncs, since
// events were missed.
type EventSource struct {
	core    *plugin.Core
	store   *Store
	resync  *plugin.Resyncer
	log     *logrus.Entry
	backMin time.Duration
	backMax time.Duration
	live    atomic.Bool // the subscription is live
	// stopsOnly: beside NRI, which starts pods, it acts on stops alone
	stopsOnly bool
}

// Live reports whether the event subscription is live.
func (s *EventSource) Live() bool { return s.live.Load() }

// NewEventSource returns a containerd event source.
func NewEventSource(core *plugin.Core, store *Store, resync *plugin.Resyncer, reconnectMax time.Duration, log *logrus.Entry) *EventSource {
	return &EventSource{core: core, store: store, resync: resync, log: log.WithField("source", "containerd"),
		backMin: config.ReconnectMin, backMax: max(reconnectMax, config.ReconnectMin)}
}

// Stops is an event source like s that acts only on stops (a task's exit
// or deletion, a container's deletion), to run beside NRI: containerd
// keeps in memory which sandboxes it must send an NRI stop for, so after
// it restarts the pods that lived through it get none (containerd v2.4.2
// internal/nri/nri.go); their task's exit still comes as an event. A stop
// costs nothing for a container without an endpoint, and one NRI stopped
// already (the core's work is idempotent).
func (s *EventSource) Stops() *EventSource {
	return &EventSource{core: s.core, store: s.store, resync: s.resync, log: s.log.WithField("acts_on", "stops"),
		backMin: s.backMin, backMax: s.backMax, stopsOnly: true}
}

// Run subscribes and handles events until ctx ends.
func (s *EventSource) Run(ctx context.Context) error {
	retry := backoff.New(s.backMin, s.backMax)
	for {
		err := s.subscribe(ctx, retry.Reset)
		s.live.Store(false)
		if ctx.Err() != nil || !plugin.Reconnects(err) {
			return nil
		}
		s.core.Observer().Reconnected("containerd")
		s.log.WithFields(logrus.Fields{"retry_in": retry.Next().String(), "error": closedOr(err)}).
			Warn("containerd event stream broken; resubscribing")
		if !retry.Wait(ctx) {
			return nil
		}
	}
}

// subscribe runs one subscription until it breaks.
func (s *EventSource) subscribe(ctx context.Context, healthy func()) error {
	c, err := s.store.Client()
	if err != nil {
		return err
	}
	ns := s.store.Namespace()
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch, errs := c.Subscribe(sctx, Filters(ns)...)
	// Publish a probe until it comes back: then the subscription is live and
	// a resync covers everything that happened before it.
	probe := time.NewTicker(config.SubscriptionProbeEvery)
	defer probe.Stop()
	live := false
	publish := func() {
		pctx, pcancel := context.WithTimeout(namespaces.WithNamespace(sctx, ns), config.ContainerdCallTimeout)
		defer pcancel()
		if err := c.EventService().Publish(pctx, TopicProbe, &emptypb.Empty{}); err != nil {
			s.log.WithError(err).Debug("publishing subscription probe")
		}
	}
	publish()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-errs:
			if err == nil {
				err = errors.New("event stream closed")
			}
			return err
		case <-probe.C:
			if !live {
				publish()
			}
		case env := <-ch:
			if env == nil {
				continue
			}
			if env.Topic == TopicProbe {
				if !live {
					live = true
					s.live.Store(true)
					healthy()
					s.log.WithField("namespace", ns).Info("subscribed to containerd events")
					s.resync.Trigger("subscribed") // events were missed before now
				}
				continue
			}
			s.handle(env.Topic, env.Event)
		}
	}
}

// Filters are the subscription's filters: the topics the source acts on
// (and its own probe), in containerd namespace ns only.
func Filters(ns string) []string {
	var out []string
	for _, topic := range []string{TopicTaskStart, TopicTaskExit, TopicTaskDelete, TopicContainerDelete, TopicProbe} {
		out = append(out, fmt.Sprintf("namespace==%q,topic==%q", ns, topic))
	}
	return out
}

// Action is what an event tells about a sandbox.
type Action int

// Actions.
const (
	Ignore  Action = iota // nothing the plugin acts on
	Start                 // a task started: maybe a sandbox
	Exit                  // a task's init process exited or its task was deleted: maybe a sandbox
	Removed               // a container was deleted
)

// Decode says what an event payload tells: which container, and what
// happened to it. An exec process's exit or deletion (its ID is not the
// container's) is not the container's.
func Decode(ev any) (id string, a Action) {
	switch e := ev.(type) {
	case *apievents.TaskStart:
		return e.ContainerID, Start
	case *apievents.TaskExit:
		if e.ID == "" || e.ID == e.ContainerID { // the init process, not an exec
			return e.ContainerID, Exit
		}
	case *apievents.TaskDelete:
		if e.ID == "" || e.ID == e.ContainerID { // containerd 2.x sends no id for the init process
			return e.ContainerID, Exit
		}
	case *apievents.ContainerDelete:
		return e.ID, Removed
	}
	return "", Ignore
}

// handle hands an event to the core's work queue at once: the queue keeps
// the order that matters per sandbox (a stop replaces a start not yet done,
// and nothing starts a stopped sandbox again) and bounds the work, so an
// event storm costs no more than one pending request per sandbox. The
// worker that syncs the sandbox counts and logs the outcome.
func (s *EventSource) handle(topic string, payload typeurl.Any) {
	if payload == nil {
		return
	}
	ev, err := typeurl.UnmarshalAny(payload)
	if err != nil {
		err = fmt.Errorf("%w: %w", plugin.ErrUndecodableEvent, err)
		level, says := plugin.Said(err)
		s.log.WithError(err).WithField("topic", topic).Log(level, says)
		return
	}
	switch id, a := Decode(ev); a {
	case Start:
		if !s.stopsOnly {
			s.core.Started(id)
		}
	case Exit:
		s.core.Exited(id)
	case Removed:
		s.core.Deleted(id)
	}
}

func closedOr(err error) string {
	if err == nil {
		return "connection closed"
	}
	return err.Error()
}
