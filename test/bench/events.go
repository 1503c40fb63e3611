package bench

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/test/harness"
)

// EventConfig runs the plugin on containerd events (the path stock
// containerd on Windows uses) with no periodic resync.
const EventConfig = `[plugin]
source = "containerd"
resync_interval = "0s"
` + harness.NetworkConfig

// EventConfigCap is EventConfig with n HNS calls in flight at most.
func EventConfigCap(n int) string {
	return strings.Replace(EventConfig, "[hcn]\n", fmt.Sprintf("[hcn]\nmax_concurrent_calls = %d\n", n), 1)
}

// StartEventFloor builds the baseline plugin into dir and runs it as the
// event-path floor (nopplugin --events) against env, until a warm-up pod
// shows that it follows containerd's events.
func StartEventFloor(ctx context.Context, env *harness.Env, dir string) error {
	bin, err := BuildNop(dir)
	if err != nil {
		return err
	}
	if err := env.StartBinary("event-floor", bin, "--events", "--containerd", env.CtrAddress, "--hns", env.SimAddress); err != nil {
		return err
	}
	p := Pod("floor-warmup", 0, 39999)
	guid, err := env.CreateSandbox(ctx, p)
	if err != nil {
		return err
	}
	w := newWatcher(env)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go w.run(wctx, time.Millisecond)
	up := w.expect(p.ID, true)
	for range 40 { // its subscription may not be live yet: the start is told again
		if err := env.PublishStart(ctx, p.ID); err != nil {
			return err
		}
		select {
		case <-up:
			return stopViaEvents(ctx, env, p.ID, guid)
		case <-time.After(250 * time.Millisecond):
		}
	}
	return fmt.Errorf("the event floor never attached its warm-up pod\n%s", env.Plugin.Tail(20))
}

// watcher polls the simulator (its control API, which has no modelled
// latency) until the sandboxes' endpoints are attached (want true) or
// deleted (want false), and tells when each one got there.
type watcher struct {
	env  *harness.Env
	mu   sync.Mutex
	want map[string]bool // endpoint name -> attached wanted
	done map[string]chan time.Time
}

func newWatcher(env *harness.Env) *watcher {
	return &watcher{env: env, want: map[string]bool{}, done: map[string]chan time.Time{}}
}

// expect registers a sandbox; the channel gets the time it got there.
func (w *watcher) expect(id string, attached bool) <-chan time.Time {
	ch := make(chan time.Time, 1)
	w.mu.Lock()
	w.want["nri-hcn-portmap-"+id], w.done["nri-hcn-portmap-"+id] = attached, ch
	w.mu.Unlock()
	return ch
}

func (w *watcher) run(ctx context.Context, every time.Duration) {
	for ctx.Err() == nil {
		st, _, err := w.env.SimClient.State(ctx)
		if err == nil {
			now := time.Now()
			attached, exists := map[string]bool{}, map[string]bool{}
			for _, ep := range st.Endpoints {
				exists[ep.Name] = true
				if ep.Namespace != "" {
					attached[ep.Name] = true
				}
			}
			w.mu.Lock()
			for name, want := range w.want {
				if (want && attached[name]) || (!want && !exists[name]) {
					w.done[name] <- now
					delete(w.want, name)
					delete(w.done, name)
				}
			}
			w.mu.Unlock()
		}
		time.Sleep(every)
	}
}

// EventLatency times s.N pods, one at a time, from /tasks/start published
// to the endpoint attached in HCN (the sandboxes, and what the CNI made,
// are made beforehand and not timed), and counts the HNS calls made until
// the last was attached. The pods are then stopped, untimed, with HNS
// answering at once, until their endpoints are gone.
func EventLatency(ctx context.Context, env *harness.Env, s Starts) ([]time.Duration, int, error) {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w := newWatcher(env)
	go w.run(wctx, 200*time.Microsecond)
	t, err := prepare(ctx, env, s)
	if err != nil {
		return nil, 0, err
	}
	before, err := HNSCalls(ctx, env)
	if err != nil {
		return nil, 0, err
	}
	out := make([]time.Duration, 0, s.N)
	for _, p := range t.pods {
		up := w.expect(p.ID, true)
		start := time.Now()
		if err := env.PublishStart(ctx, p.ID); err != nil {
			return nil, 0, err
		}
		select {
		case at := <-up:
			out = append(out, at.Sub(start))
		case <-time.After(30 * time.Second):
			return nil, 0, fmt.Errorf("pod %s: endpoint not attached within 30s", p.Name)
		}
	}
	after, err := HNSCalls(ctx, env)
	if err != nil {
		return nil, 0, err
	}
	var gone []<-chan time.Time
	err = t.teardown(ctx, env, func(p harness.Pod, guid hcn.GUID) error {
		gone = append(gone, w.expect(p.ID, false))
		return stopViaEvents(ctx, env, p.ID, guid)
	})
	if err != nil {
		return nil, 0, err
	}
	for i, ch := range gone {
		select {
		case <-ch:
		case <-time.After(30 * time.Second):
			return nil, 0, fmt.Errorf("pod %s: endpoint not removed within 30s", t.pods[i].Name)
		}
	}
	return out, after - before, nil
}

// stopViaEvents stops a sandbox as containerd does on Windows: task exit,
// namespace gone, container deleted.
func stopViaEvents(ctx context.Context, env *harness.Env, id string, guid hcn.GUID) error {
	if err := env.PublishExit(ctx, id); err != nil {
		return err
	}
	if err := env.SimClient.DeleteNamespace(ctx, guid); err != nil {
		return err
	}
	if err := env.DeleteSandbox(ctx, id); err != nil {
		return err
	}
	return env.PublishContainerDelete(ctx, id)
}

// EventChurnResult is one churn through containerd events.
type EventChurnResult struct {
	Pods, Concurrency int
	HNSLatency        time.Duration
	Serialized        bool // HNS modelled as doing one call at a time
	Elapsed           time.Duration
	PodsPerSecond     float64
	StartLatency      Percentiles // start published -> endpoint attached
	PeakGoroutines    float64
	PeakRSS           int64
	Leaked            int
}

// EventChurn starts and stops n pods through containerd events, concurrency
// at a time, every HNS call taking latency (one at a time when serialized).
func EventChurn(ctx context.Context, env *harness.Env, n, concurrency, firstPort int, latency time.Duration, serialized bool) (EventChurnResult, error) {
	return EventChurnOf(ctx, env, func(i int) harness.Pod { return Pod("evchurn", i, firstPort+i) }, n, concurrency, latency, serialized)
}

// GameServerChurn is the game servers' churn (issue 56): 300 Agones-style
// pods (GameServer, host ports from 7000) through containerd events, 50
// at a time, every HNS call taking 50 ms, on env's plugin.
func GameServerChurn(ctx context.Context, env *harness.Env) (EventChurnResult, error) {
	return EventChurnOf(ctx, env, func(i int) harness.Pod { return GameServer(i, 7000+i) }, 300, 50, 50*time.Millisecond, false)
}

// EventChurnOf is EventChurn of the pods pod makes (pod i).
func EventChurnOf(ctx context.Context, env *harness.Env, pod func(i int) harness.Pod, n, concurrency int, latency time.Duration, serialized bool) (EventChurnResult, error) {
	res := EventChurnResult{Pods: n, Concurrency: concurrency, HNSLatency: latency, Serialized: serialized}
	if err := env.SimClient.SetLatency(ctx, latency); err != nil {
		return res, err
	}
	if err := env.SimClient.SetSerialized(ctx, serialized); err != nil {
		return res, err
	}
	defer func() {
		_ = env.SimClient.SetLatency(context.WithoutCancel(ctx), 0)
		_ = env.SimClient.SetSerialized(context.WithoutCancel(ctx), false)
	}()
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w := newWatcher(env)
	go w.run(wctx, 2*time.Millisecond)
	peak := make(chan struct{})
	go func() { // the plugin's goroutines at their peak
		defer close(peak)
		for wctx.Err() == nil {
			if m, err := env.Metrics(); err == nil && m["go_goroutines"] > res.PeakGoroutines {
				res.PeakGoroutines = m["go_goroutines"]
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
		starts   []time.Duration
	)
	fail := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		if firstErr == nil {
			firstErr = err
		}
	}
	jobs := make(chan int)
	begin := time.Now()
	for range concurrency {
		wg.Go(func() {
			for i := range jobs {
				p := pod(i)
				guid, err := env.CreateSandbox(ctx, p)
				if err != nil {
					fail(err)
					continue
				}
				up := w.expect(p.ID, true)
				t0 := time.Now()
				if err := env.PublishStart(ctx, p.ID); err != nil {
					fail(err)
					continue
				}
				select {
				case at := <-up:
					mu.Lock()
					starts = append(starts, at.Sub(t0))
					mu.Unlock()
				case <-time.After(2 * time.Minute):
					fail(fmt.Errorf("pod %s: not attached within 2 minutes", p.Name))
					continue
				}
				gone := w.expect(p.ID, false)
				if err := stopViaEvents(ctx, env, p.ID, guid); err != nil {
					fail(err)
					continue
				}
				select {
				case <-gone:
				case <-time.After(2 * time.Minute):
					fail(fmt.Errorf("pod %s: endpoint not removed within 2 minutes", p.Name))
				}
			}
		})
	}
	for i := range n {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	res.Elapsed = time.Since(begin)
	res.PodsPerSecond = float64(n) / res.Elapsed.Seconds()
	res.StartLatency = Summarize(starts)
	if m, err := ReadMemory(env.Plugin.PID()); err == nil {
		res.PeakRSS = m.Peak
	}
	cancel()
	<-peak
	if firstErr != nil {
		return res, firstErr
	}
	st, _, err := env.SimClient.State(ctx)
	if err != nil {
		return res, err
	}
	for _, ep := range st.Endpoints {
		if strings.HasPrefix(ep.Name, "nri-hcn-portmap-") {
			res.Leaked++
		}
	}
	return res, nil
}
