// Package nri is the plugin's NRI adapter: it registers with the runtime's
// NRI socket, turns RunPodSandbox, StopPodSandbox, RemovePodSandbox and
// Synchronize into core operations, and reconnects when the runtime
// restarts.
package nri

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/containerd/nri/pkg/api"
	nrilog "github.com/containerd/nri/pkg/log"
	"github.com/containerd/nri/pkg/stub"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/backoff"
	"github.com/sirupsen/logrus"
)

// Config says how to reach the runtime's NRI socket.
type Config struct {
	Socket       string
	PluginName   string
	PluginIndex  string
	ReconnectMin time.Duration // first backoff step (default 500ms)
	ReconnectMax time.Duration // backoff cap
}

// Source feeds NRI pod events into the core. It keeps the plugin
// registered: when the connection drops (the runtime restarts) it reconnects
// with capped exponential backoff instead of exiting.
type Source struct {
	core       *plugin.Core
	cfg        Config
	log        *logrus.Entry
	registered chan struct{}
	once       sync.Once
	connected  atomic.Bool
}

// Connected reports whether the plugin is registered with the runtime now.
func (s *Source) Connected() bool { return s.connected.Load() }

// NewSource returns an NRI event source for core.
func NewSource(core *plugin.Core, cfg Config, log *logrus.Entry) *Source {
	if cfg.ReconnectMin <= 0 {
		cfg.ReconnectMin = 500 * time.Millisecond
	}
	if cfg.ReconnectMax < cfg.ReconnectMin {
		cfg.ReconnectMax = cfg.ReconnectMin
	}
	return &Source{core: core, cfg: cfg, log: log.WithField("source", "nri"), registered: make(chan struct{})}
}

// Registered is closed once the runtime has accepted the plugin.
func (s *Source) Registered() <-chan struct{} { return s.registered }

// nriHandler is the stub plugin: one per connection.
type nriHandler struct {
	src *Source
}

var (
	_ stub.SynchronizeInterface = (*nriHandler)(nil)
	_ stub.RunPodInterface      = (*nriHandler)(nil)
	_ stub.StopPodInterface     = (*nriHandler)(nil)
	_ stub.RemovePodInterface   = (*nriHandler)(nil)
)

// failurePolicy is what the runtime does when the plugin does not answer:
// keep it connected after a slow answer (it answers within its own deadline
// anyway) and let the request proceed. Never FailRequest, even with
// fail-closed: the runtime applies it to every request, so a plugin that
// crashed or restarts would fail StopPodSandbox and RemovePodSandbox too,
// and stop and remove must never fail for our sake. Runtimes before NRI
// v0.12.4 ignore the policy.
func failurePolicy() *api.FailurePolicy {
	return &api.FailurePolicy{FailRequest: false, KeepConnected: true}
}

// Run connects, serves and reconnects until ctx ends. It returns nil when ctx
// is cancelled, and an error only when the stub cannot even be built.
func (s *Source) Run(ctx context.Context) error {
	retry := backoff.New(s.cfg.ReconnectMin, s.cfg.ReconnectMax)
	for {
		h := &nriHandler{src: s}
		st, err := stub.New(h,
			stub.WithPluginName(s.cfg.PluginName),
			stub.WithPluginIdx(s.cfg.PluginIndex),
			stub.WithSocketPath(s.cfg.Socket),
			stub.WithLogger(nriLogger{s.log}),
			// Never be disconnected for a slow answer (the plugin answers
			// within its own deadline anyway); fail or pass the request as
			// the failure policy says. Runtimes before NRI v0.12.4 ignore it.
			stub.WithFailurePolicy(failurePolicy()),
		)
		if err != nil {
			return fmt.Errorf("nri: creating plugin stub: %w", err)
		}
		started := time.Now()
		err = s.serve(ctx, st)
		if ctx.Err() != nil {
			return nil
		}
		s.core.Observer().Reconnected("nri")
		if time.Since(started) > 10*s.cfg.ReconnectMax {
			retry.Reset() // it was up for a good while: start over
		}
		s.log.WithFields(logrus.Fields{"socket": s.cfg.Socket, "retry_in": retry.Next().String(), "error": closedOr(err)}).
			Warn("NRI connection lost or refused; reconnecting")
		if !retry.Wait(ctx) {
			return nil
		}
	}
}

// serve registers and serves one connection until it closes or ctx ends.
func (s *Source) serve(ctx context.Context, st stub.Stub) error {
	if err := st.Start(ctx); err != nil {
		return err
	}
	s.connected.Store(true)
	defer s.connected.Store(false)
	s.once.Do(func() { close(s.registered) })
	done := make(chan struct{})
	go func() {
		st.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		st.Stop()
		<-done
		return ctx.Err()
	}
}

func closedOr(err error) string {
	if err == nil {
		return "connection closed"
	}
	return err.Error()
}

func podFromNRI(p *api.PodSandbox) plugin.Pod {
	return plugin.Pod{ID: p.GetId(), Name: p.GetName(), Namespace: p.GetNamespace(), UID: p.GetUid(),
		Annotations: p.GetAnnotations(), Labels: p.GetLabels(), RuntimeHandler: p.GetRuntimeHandler()}
}

// Synchronize answers at once and reconciles in the background: NRI gives the
// whole exchange 2 s and holds the runtime's lock meanwhile, while a
// reconcile of many pods costs HNS calls. Per-sandbox locks keep it
// consistent with events that arrive while it runs.
func (h *nriHandler) Synchronize(_ context.Context, pods []*api.PodSandbox, _ []*api.Container) ([]*api.ContainerUpdate, error) {
	ps := make([]plugin.Pod, 0, len(pods))
	for _, p := range pods {
		ps = append(ps, podFromNRI(p))
	}
	log := h.src.log.WithField("pods", len(ps))
	log.Info("synchronizing with the runtime")
	core := h.src.core
	core.Go(func(ctx context.Context) { // joined when the core closes
		sum, err := core.Reconcile(ctx, ps)
		if err != nil {
			log.WithError(err).Error("synchronize: reconcile failed")
			return
		}
		sum.Log(log, "synchronize")
		core.Observer().Reconciled("synchronize", sum.Created, sum.Deleted, sum.Unchanged, sum.Failed)
	})
	return nil, nil
}

// RunPodSandbox builds the pod's endpoint within the deadline. An error
// fails the pod, so a bad annotation, a denied or conflicting host port (and,
// with fail-closed, an HCN slower than the deadline) is reported to the
// kubelet.
func (h *nriHandler) RunPodSandbox(ctx context.Context, p *api.PodSandbox) error {
	pod := podFromNRI(p)
	err := h.src.core.StartPod(ctx, pod)
	if err != nil {
		h.src.core.PodLog(pod).WithError(err).Error("RunPodSandbox: port mappings not applied")
	}
	return err
}

// StopPodSandbox removes the pod's endpoint.
func (h *nriHandler) StopPodSandbox(ctx context.Context, p *api.PodSandbox) error {
	h.src.core.StopPod(ctx, podFromNRI(p))
	return nil
}

// RemovePodSandbox removes anything left (a no-op when Stop did the work).
func (h *nriHandler) RemovePodSandbox(ctx context.Context, p *api.PodSandbox) error {
	h.src.core.StopPod(ctx, podFromNRI(p))
	return nil
}

// nriLogger routes the NRI library's own logging through logrus.
type nriLogger struct{ e *logrus.Entry }

var _ nrilog.Logger = nriLogger{}

func (l nriLogger) Debugf(_ context.Context, f string, a ...any) { l.e.Debug(fmt.Sprintf(f, a...)) }

// Infof: the NRI stub's own progress lines ("Created plugin ...", on every
// reconnect attempt) read like success next to a failure; they are debug
// detail here, the source logs what matters.
func (l nriLogger) Infof(_ context.Context, f string, a ...any)  { l.e.Debug(fmt.Sprintf(f, a...)) }
func (l nriLogger) Warnf(_ context.Context, f string, a ...any)  { l.e.Warn(fmt.Sprintf(f, a...)) }
func (l nriLogger) Errorf(_ context.Context, f string, a ...any) { l.e.Error(fmt.Sprintf(f, a...)) }
