// The NRI runtime side (nri/pkg/adaptation) and what it records of plugin calls.

package harness

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/containerd/nri/pkg/adaptation"
	"github.com/containerd/nri/pkg/api"
)

// StartNRI starts the NRI runtime side on a socket in e.Dir.
func (e *Env) StartNRI() error {
	e.NRISocket = filepath.Join(e.Dir, "nri.sock")
	backend := filepath.Join(e.Dir, "nri-runtime.sock")
	if e.nriProxy == nil {
		p, err := newConnProxy(e.NRISocket, backend)
		if err != nil {
			return err
		}
		e.nriProxy = p
	}
	empty := filepath.Join(e.Dir, "nri-plugins")
	if err := os.MkdirAll(empty, 0o755); err != nil {
		return err
	}
	syncFn := func(ctx context.Context, cb adaptation.SyncCB) error {
		pods := e.runtimePods()
		start := time.Now()
		_, err := cb(ctx, pods, nil)
		e.mu.Lock()
		e.lastSync = time.Since(start)
		e.mu.Unlock()
		select {
		case e.syncs <- struct{}{}:
		default:
		}
		return err
	}
	updateFn := func(context.Context, []*adaptation.ContainerUpdate) ([]*adaptation.ContainerUpdate, error) {
		return nil, nil
	}
	r, err := adaptation.New("containerd", ContainerdVersion, syncFn, updateFn,
		adaptation.WithSocketPath(backend), adaptation.WithPluginPath(empty), adaptation.WithPluginConfigPath(empty),
		adaptation.WithMetrics(recorder{e}))
	if err != nil {
		return fmt.Errorf("NRI adaptation: %w", err)
	}
	if err := r.Start(); err != nil {
		return fmt.Errorf("NRI adaptation start: %w", err)
	}
	e.NRI = r
	return nil
}

func (e *Env) runtimePods() []*api.PodSandbox {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]*api.PodSandbox, 0, len(e.pods))
	for _, p := range e.pods {
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b *api.PodSandbox) int { return strings.Compare(a.Id, b.Id) })
	return out
}

// StopNRI stops the NRI runtime side and closes the plugin connections, as
// a containerd restart does.
func (e *Env) StopNRI() {
	if e.NRI != nil {
		e.NRI.Stop()
		e.NRI = nil
	}
	if e.nriProxy != nil {
		e.nriProxy.drop()
	}
	for len(e.syncs) > 0 {
		<-e.syncs
	}
}

// Synced delivers a value each time a plugin finished registering.
func (e *Env) Synced() <-chan struct{} { return e.syncs }

// LastSync is how long the plugin took to answer the last Synchronize.
func (e *Env) LastSync() time.Duration {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.lastSync
}

// ResetInvocations forgets the recorded plugin calls.
func (e *Env) ResetInvocations() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.invocations = nil
}

// Invocation is one plugin call as the NRI runtime side recorded it.
type Invocation struct {
	Plugin, Operation string
	Err               error
	Latency           time.Duration
}

// Invocations returns what the runtime side recorded of plugin calls.
func (e *Env) Invocations() []Invocation {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.invocations)
}

// recorder implements adaptation.Metrics.
type recorder struct{ e *Env }

func (r recorder) RecordPluginInvocation(plugin, op string, err error) {
	r.e.mu.Lock()
	defer r.e.mu.Unlock()
	r.e.invocations = append(r.e.invocations, Invocation{Plugin: plugin, Operation: op, Err: err})
}

func (r recorder) RecordPluginLatency(plugin, op string, d time.Duration) {
	r.e.mu.Lock()
	defer r.e.mu.Unlock()
	for i := len(r.e.invocations) - 1; i >= 0; i-- {
		if inv := &r.e.invocations[i]; inv.Plugin == plugin && inv.Operation == op && inv.Latency == 0 {
			inv.Latency = d
			break
		}
	}
}

func (recorder) RecordPluginAdjustments(string, string, *adaptation.ContainerAdjustment, int, int) {}
func (recorder) UpdatePluginCount(int)                                                             {}
