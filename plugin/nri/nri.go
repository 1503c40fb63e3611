// Package nri is the plugin's NRI adapter: it registers with the runtime's
// NRI socket, turns RunPodSandbox, StopPodSandbox, RemovePodSandbox and
// Synchronize into core operations, and reconnects when the runtime
// restarts. A plugin the runtime launched (NRI's environment names its
// socket, name and index) registers under the runtime's name and index,
// takes its configuration from Configure, and ends when the runtime closes
// its connection.
package nri

import (
	"context"
	"errors"
	"fmt"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/config"
	"os"
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
	// Launched: the runtime started this process (Launched()). Name, index
	// and socket come from the runtime; there is one connection only.
	Launched bool
	// Configure, when set, receives the configuration NRI hands over (the
	// runtime's <index>-<name>.conf, "" without one) before any event; an
	// error fails the registration with that message.
	Configure func(ctx context.Context, config string) error
	// Registered, when set, hears the registration begin and end, with the
	// name the runtime knows the plugin by (<index>-<name>) and the mode
	// (launched or external).
	Registered func(plugin, mode string, on bool)
}

// Launched reports whether the runtime launched this process: NRI's
// environment names a pre-connected socket.
func Launched() bool { return os.Getenv(api.PluginSocketEnvVar) != "" }

// Identity is the name and index the runtime gave a launched plugin
// ("<index>-<name>"), "" when not launched.
func Identity() string {
	if !Launched() {
		return ""
	}
	return os.Getenv(api.PluginIdxEnvVar) + "-" + os.Getenv(api.PluginNameEnvVar)
}

// ErrRuntimeGone: the runtime that launched the plugin closed its
// connection; a launched plugin ends (the runtime launches it again when it
// starts again).
var ErrRuntimeGone = errors.New("the runtime closed the NRI connection of the plugin it launched")

// Source feeds NRI pod events into the core. It keeps the plugin
// registered: when the connection drops (the runtime restarts) it reconnects
// with capped exponential backoff instead of exiting.
type Source struct {
	core       atomic.Pointer[plugin.Core]
	cfg        Config
	log        *logrus.Entry
	registered chan struct{}
	once       sync.Once
	hookMu     sync.Mutex // guards cfg.Registered
	connected  atomic.Bool
	// launched mode: the one connection's Run, and when it ended
	running atomic.Bool
	// refused: why Configure refused the runtime's configuration
	refused atomic.Pointer[error]
	gone    chan struct{}
	goneErr error
}

// Connected reports whether the plugin is registered with the runtime now.
func (s *Source) Connected() bool { return s.connected.Load() }

// NewSource returns an NRI event source for core (nil: set later with
// SetCore, from cfg.Configure, before any event).
func NewSource(core *plugin.Core, cfg Config, log *logrus.Entry) *Source {
	if cfg.ReconnectMin <= 0 {
		cfg.ReconnectMin = config.ReconnectMin
	}
	if cfg.ReconnectMax < cfg.ReconnectMin {
		cfg.ReconnectMax = cfg.ReconnectMin
	}
	s := &Source{cfg: cfg, log: log.WithField("source", "nri"), registered: make(chan struct{}), gone: make(chan struct{})}
	s.core.Store(core)
	return s
}

// SetRegistered sets cfg.Registered (a launched plugin has its metrics only
// once Configure built them).
func (s *Source) SetRegistered(f func(plugin, mode string, on bool)) {
	s.hookMu.Lock()
	s.cfg.Registered = f
	s.hookMu.Unlock()
}

func (s *Source) registeredHook() func(plugin, mode string, on bool) {
	s.hookMu.Lock()
	defer s.hookMu.Unlock()
	return s.cfg.Registered
}

// SetCore gives the source the core its events go to.
func (s *Source) SetCore(core *plugin.Core) { s.core.Store(core) }

// errNotConfigured: an event before Configure built the core.
var errNotConfigured = errors.New("nri-hcn-portmap: not configured yet")

func (h *nriHandler) coreOrErr() (*plugin.Core, error) {
	if err := h.src.refused.Load(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfigRefused, *err)
	}
	if c := h.src.core.Load(); c != nil {
		return c, nil
	}
	return nil, errNotConfigured
}

// Registered is closed once the runtime has accepted the plugin.
func (s *Source) Registered() <-chan struct{} { return s.registered }

// nriHandler is the stub plugin: one per connection.
type nriHandler struct {
	src *Source
}

var (
	_ stub.ConfigureInterface   = (*nriHandler)(nil)
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

// stubOptions are the stub's options: a launched plugin keeps the name,
// index and socket the runtime gave it.
func (s *Source) stubOptions() []stub.Option {
	opts := []stub.Option{
		stub.WithLogger(nriLogger{s.log}),
		// Never be disconnected for a slow answer (the plugin answers
		// within its own deadline anyway); fail or pass the request as
		// the failure policy says. Runtimes before NRI v0.12.4 ignore it.
		stub.WithFailurePolicy(failurePolicy()),
	}
	if !s.cfg.Launched {
		opts = append(opts, stub.WithPluginName(s.cfg.PluginName), stub.WithPluginIdx(s.cfg.PluginIndex),
			stub.WithSocketPath(s.cfg.Socket))
	}
	return opts
}

// Run connects, serves and reconnects until ctx ends. It returns nil when ctx
// is cancelled, and an error only when the stub cannot even be built. A
// launched plugin has one connection: Run returns ErrRuntimeGone when the
// runtime closes it, and a second Run only waits for that.
func (s *Source) Run(ctx context.Context) error {
	if s.cfg.Launched {
		return s.runLaunched(ctx)
	}
	retry := backoff.New(s.cfg.ReconnectMin, s.cfg.ReconnectMax)
	for {
		h := &nriHandler{src: s}
		st, err := stub.New(h, s.stubOptions()...)
		if err != nil {
			return fmt.Errorf("nri: creating plugin stub: %w", err)
		}
		started := time.Now()
		err = s.serve(ctx, st)
		if ctx.Err() != nil || !plugin.Reconnects(err) {
			return nil
		}
		if c := s.core.Load(); c != nil {
			c.Observer().Reconnected("nri")
		}
		if time.Since(started) > config.ReconnectStableFor*s.cfg.ReconnectMax {
			retry.Reset() // it was up for a good while: start over
		}
		s.log.WithFields(logrus.Fields{"socket": s.cfg.Socket, "retry_in": retry.Next().String(), "error": closedOr(err)}).
			Warn("NRI connection lost or refused; reconnecting")
		if !retry.Wait(ctx) {
			return nil
		}
	}
}

func (s *Source) runLaunched(ctx context.Context) error {
	if !s.running.CompareAndSwap(false, true) {
		select {
		case <-s.gone:
			return s.goneErr
		case <-ctx.Done():
			return nil
		}
	}
	st, err := stub.New(&nriHandler{src: s}, s.stubOptions()...)
	if err == nil {
		err = s.serve(ctx, st)
	}
	if ctx.Err() != nil {
		err = nil
	} else {
		err = fmt.Errorf("%w (%s): %w", ErrRuntimeGone, Identity(), closedOrErr(err))
	}
	s.goneErr = err
	close(s.gone)
	return err
}

func closedOrErr(err error) error {
	if err == nil {
		return errors.New("connection closed")
	}
	return err
}

// serve registers and serves one connection until it closes or ctx ends.
func (s *Source) serve(ctx context.Context, st stub.Stub) error {
	if err := st.Start(ctx); err != nil {
		return err
	}
	s.connected.Store(true)
	defer s.connected.Store(false)
	if f := s.registeredHook(); f != nil {
		id, mode := s.cfg.PluginIndex+"-"+s.cfg.PluginName, "external"
		if s.cfg.Launched {
			id, mode = Identity(), "launched"
		}
		f(id, mode, true)
		defer f(id, mode, false)
	}
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

func closedOr(err error) string { return closedOrErr(err).Error() }

func podFromNRI(p *api.PodSandbox) plugin.Pod {
	return plugin.Pod{ID: p.GetId(), Name: p.GetName(), Namespace: p.GetNamespace(), UID: p.GetUid(),
		Annotations: p.GetAnnotations(), Labels: p.GetLabels(), RuntimeHandler: p.GetRuntimeHandler()}
}

// Configure hands the runtime's configuration to cfg.Configure. A refusal
// fails the registration at Synchronize, the next step, so that the runtime
// logs why: NRI v0.12.5's stub closes the connection as soon as Configure
// returns an error, often before the reply is out, and the runtime then
// logs only "ttrpc: closed".
func (h *nriHandler) Configure(ctx context.Context, config, runtime, version string) (api.EventMask, error) {
	h.src.log.WithFields(logrus.Fields{"runtime": runtime, "runtime_version": version, "launched": h.src.cfg.Launched,
		"config_bytes": len(config)}).Info("configured by the NRI runtime")
	if f := h.src.cfg.Configure; f != nil {
		if err := f(ctx, config); err != nil {
			h.src.log.WithError(err).Error("the configuration the NRI runtime handed over is rejected")
			h.src.refused.Store(&err)
		}
	}
	return 0, nil // every event the stub implements
}

// ErrConfigRefused: the configuration the runtime handed over was refused;
// the plugin fails its registration.
var ErrConfigRefused = errors.New("nri-hcn-portmap refuses its NRI configuration")

// Synchronize answers at once and reconciles in the background: NRI gives the
// whole exchange 2 s and holds the runtime's lock meanwhile, while a
// reconcile of many pods costs HNS calls. The reconcile goes through the
// controller's queue like every other trigger, so events that arrive while
// it runs are synced in their turn.
func (h *nriHandler) Synchronize(_ context.Context, pods []*api.PodSandbox, _ []*api.Container) ([]*api.ContainerUpdate, error) {
	ps := make([]plugin.Pod, 0, len(pods))
	for _, p := range pods {
		ps = append(ps, podFromNRI(p))
	}
	core, err := h.coreOrErr()
	if err != nil {
		return nil, err
	}
	log := h.src.log.WithField("pods", len(ps))
	log.Info("synchronizing with the runtime")
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
	core, err := h.coreOrErr()
	if err != nil {
		return err
	}
	return core.StartPod(ctx, podFromNRI(p)) // the worker that synced it logged the outcome
}

// StopPodSandbox removes the pod's endpoint.
func (h *nriHandler) StopPodSandbox(ctx context.Context, p *api.PodSandbox) error {
	if core, err := h.coreOrErr(); err == nil {
		core.StopPod(ctx, podFromNRI(p))
	}
	return nil
}

// RemovePodSandbox removes anything left (a no-op when Stop did the work).
func (h *nriHandler) RemovePodSandbox(ctx context.Context, p *api.PodSandbox) error {
	if core, err := h.coreOrErr(); err == nil {
		core.RemovePod(ctx, podFromNRI(p))
	}
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
