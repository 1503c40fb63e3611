package plugin

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/util/workqueue"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn/hcnsim"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/request"
)

// Issue 29: behaviours that every test missed when they were changed one
// at a time in the code. Each of these was seen failing with its behaviour
// broken before the core was reshaped.

// delays is a rate limiter that records, per sandbox, the delay the queue
// asked it for each retry (client-go's exponential limiter underneath).
type delays struct {
	workqueue.TypedRateLimiter[string]
	mu  sync.Mutex
	got map[string][]time.Duration
}

func newDelays(base, max time.Duration) *delays {
	return &delays{TypedRateLimiter: workqueue.NewTypedItemExponentialFailureRateLimiter[string](base, max), got: map[string][]time.Duration{}}
}

func (d *delays) When(id string) time.Duration {
	w := d.TypedRateLimiter.When(id)
	d.mu.Lock()
	d.got[id] = append(d.got[id], w)
	d.mu.Unlock()
	return w
}

func (d *delays) of(id string) []time.Duration {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.got[id])
}

// 1: after a sandbox's sync succeeds its retry delay starts over: a later
// failure waits the shortest delay, not the one the earlier failures grew.
func TestRetryDelayStartsOverAfterASuccess(t *testing.T) {
	lim := newDelays(time.Millisecond, time.Second)
	f := newFixture(t, withLimiter(lim))
	p := f.eventPod("p", "8080:80")
	if err := f.sim.InjectFault(hcnsim.Fault{Op: hcnsim.OpCreateEndpoint, Kind: "unavailable", Count: 3}); err != nil {
		t.Fatal(err)
	}
	if err := startedAndWait(t, f, p); err != nil {
		t.Fatal(err)
	}
	grown := []time.Duration{time.Millisecond, 2 * time.Millisecond, 4 * time.Millisecond}
	if got := lim.of("p"); !slices.Equal(got, grown) {
		t.Fatalf("retry delays %v, want %v", got, grown)
	}
	// later: the endpoint is detached behind the plugin's back, and the
	// repair's first attach fails once
	ep := f.endpoints("p")[0]
	if err := f.sim.RemoveNamespaceEndpoint(ctx, ep.Namespace, ep.ID); err != nil {
		t.Fatal(err)
	}
	if err := f.sim.InjectFault(hcnsim.Fault{Op: hcnsim.OpAddNamespaceEndpoint, Kind: "unavailable", Count: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.core.ReconcileAll(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the repair is retried and attaches", func() bool {
		eps := f.endpoints("p")
		return len(eps) == 1 && eps[0].Namespace != ""
	})
	if got := lim.of("p"); !slices.Equal(got, append(grown, time.Millisecond)) {
		t.Fatalf("retry delays %v: the failure after a success did not start over at %v", got, time.Millisecond)
	}
}

// 2: a RunPodSandbox that arrives while an older sync of the same sandbox
// runs is answered by a sync that began after it arrived. Here the older
// sync (from a /tasks/start, before the pod's annotation was known) makes
// no endpoint; the runtime's request must not return before its endpoint
// exists.
func TestRunPodSandboxIsAnsweredByASyncThatBeganAfterIt(t *testing.T) {
	f := newFixture(t)
	f.core.opt.Deadline = 5 * time.Second
	p := f.sandbox("p", "8080:80")
	f.store.mu.Lock()
	f.store.sbs["p"].Metadata = criMeta("", "") // the record the event's sync reads: nothing asked
	f.store.mu.Unlock()
	f.sim.SetLatency(50 * time.Millisecond) // the later sync's create and attach take a while
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	f.store.hookSandbox(func(string) {
		once.Do(func() {
			close(entered)
			<-release
		})
	})
	f.started("p")
	<-entered // the older sync runs
	answered := make(chan error, 1)
	go func() { answered <- f.core.StartPod(ctx, p) }()
	eventually(t, "the runtime's request is recorded", func() bool { return f.core.waiting("p") })
	close(release)
	if err := waitResult(t, answered); err != nil {
		t.Fatalf("StartPod: %v", err)
	}
	if eps := f.endpoints("p"); len(eps) != 1 || eps[0].Namespace == "" {
		t.Fatalf("StartPod answered before its endpoint existed: %+v", eps)
	}
}

// 3: a sandbox that a resync finds stopped in containerd is final: a later
// /tasks/start (late, or repeated) does not bring its endpoint back.
func TestSandboxAResyncFindsStoppedIsFinal(t *testing.T) {
	f := newFixture(t)
	p := f.eventPod("p", "8080:80")
	if err := startedAndWait(t, f, p); err != nil {
		t.Fatal(err)
	}
	f.store.mu.Lock()
	f.store.tasks["p"] = TaskStopped // its exit event was missed
	f.store.mu.Unlock()
	if _, err := f.core.ReconcileAll(ctx); err != nil {
		t.Fatal(err)
	}
	if eps := f.endpoints("p"); len(eps) != 0 {
		t.Fatalf("the resync kept %+v of a stopped sandbox", eps)
	}
	if err := startedAndWait(t, f, p); err != nil {
		t.Fatalf("late start: %v", err)
	}
	never(t, 300*time.Millisecond, "a late /tasks/start brought the stopped sandbox's endpoint back",
		func() bool { return len(f.endpoints("p")) > 0 })
}

// 4: a pod whose hostPorts its CNI maps, every one, still gets its report
// (the event and the condition say who maps each port).
func TestPodWhoseCNIMapsEveryHostPortIsReported(t *testing.T) {
	rep := &reports{}
	f := newFixture(t, func(o *Options) { o.Reporter = rep; o.Inputs = Inputs{Annotations: true, CRI: true} })
	f.sandbox("s", "")
	f.store.sbs["s"].Metadata = criMeta("", criPorts(1, 1)) // hostPort 9001
	bridge, err := f.sim.CreateNetwork(ctx, hcn.NetworkSpec{Name: "cbr0", Type: hcn.NetworkNAT, Subnet: "10.244.0.0/24", Gateway: "10.244.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	cni, err := f.sim.CreateEndpoint(ctx, hcn.EndpointSpec{Name: "cbr0_s", NetworkID: bridge.ID,
		PortMappings: []hcn.PortMappingPolicy{{Protocol: hcn.TCP, ExternalPort: 9001, InternalPort: 80}}})
	if err == nil {
		err = f.sim.AddNamespaceEndpoint(ctx, f.store.sbs["s"].NetNS, cni.ID)
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := f.startRetrying(Pod{ID: "s", Partial: true}); err != nil {
		t.Fatal(err)
	}
	if eps := f.endpoints("s"); len(eps) != 0 {
		t.Fatalf("an endpoint of ours for ports the CNI maps: %+v", eps)
	}
	got, ok := rep.last()
	if !ok || !got.Mapped || got.Endpoint != "" || len(got.CNI) != 1 || got.CNI[0].Endpoint != cni.ID || got.Pod.Name != "p" {
		t.Fatalf("report %+v (sent %v), want the pod told that the CNI's endpoint %s maps 9001", got, ok, cni.ID)
	}
}

// restartWith closes f's core and starts another one over the same HNS and
// containerd whose manager has cfg (the plugin restarted with a changed
// configuration) and whose options opt changes.
func (f *fixture) restartWith(t *testing.T, cfg hcn.ManagerConfig, opt func(*Options)) {
	t.Helper()
	f.core.Close()
	o := f.core.opt
	if opt != nil {
		opt(&o)
	}
	f.core = NewCore(hcn.NewManager(f.sim, cfg), f.store, o, f.core.log)
	t.Cleanup(f.core.Close)
}

// 5, 6, 7: a change of configuration that changes how a running pod's
// endpoint behaves rebuilds it at the next resync after a restart: its
// OutBoundNAT policy, its route's metric or next hop, its policies'
// local-routed flag. Without the change nothing is rebuilt.
func TestBehaviourChangingConfigurationRebuildsRunningPods(t *testing.T) {
	base := testManagerConfig()
	for _, tc := range []struct {
		name    string
		cfg     func(*hcn.ManagerConfig)
		opt     func(*Options)
		rebuilt func(ep hcn.Endpoint) bool // the new endpoint shows the change
	}{
		{"nothing changed", nil, nil, nil},
		{"outbound_nat on", func(c *hcn.ManagerConfig) { c.OutboundNAT = true }, nil,
			func(ep hcn.Endpoint) bool { return ep.OutboundNAT }},
		{"route_metric", func(c *hcn.ManagerConfig) { c.RouteMetric = 6000 }, nil,
			func(ep hcn.Endpoint) bool { return len(ep.Routes) == 1 && ep.Routes[0].Metric == 6000 }},
		{"default route's next hop", func(c *hcn.ManagerConfig) { c.DefaultRoute = hcn.RouteNone }, nil,
			func(ep hcn.Endpoint) bool { return len(ep.Routes) == 1 && ep.Routes[0].NextHop == "0.0.0.0" }},
		{"local_routed_vip off", nil, func(o *Options) { o.Policy.LocalRoutedVIP = false },
			func(ep hcn.Endpoint) bool { return len(ep.PortMappings) == 1 && ep.PortMappings[0].Flags == 0 }},
	} {
		for _, from := range []bool{false, true} { // and back: off to on, on to off
			if tc.cfg == nil && from {
				continue
			}
			t.Run(fmt.Sprintf("%s/reverse=%v", tc.name, from), func(t *testing.T) {
				f := newFixture(t)
				first, second := base, base
				o1, o2 := func(*Options) {}, func(*Options) {}
				switch {
				case tc.cfg != nil && !from:
					tc.cfg(&second)
				case tc.cfg != nil:
					tc.cfg(&first)
				}
				if tc.opt != nil {
					o2 = tc.opt
				}
				f.restartWith(t, first, o1)
				p := f.eventPod("p", "8080:80") // the resync reads its request from containerd
				if err := f.core.StartPod(ctx, p); err != nil {
					t.Fatal(err)
				}
				before := f.endpoints("p")[0]
				f.restartWith(t, second, o2)
				if _, err := f.core.ReconcileAll(ctx); err != nil {
					t.Fatal(err)
				}
				eps := f.endpoints("p")
				if len(eps) != 1 || eps[0].Namespace == "" {
					t.Fatalf("after the restart: %+v", eps)
				}
				switch {
				case tc.rebuilt == nil && eps[0].ID != before.ID:
					t.Fatalf("rebuilt with nothing changed: %+v -> %+v", before, eps[0])
				case tc.rebuilt != nil && (eps[0].ID == before.ID || (!from && !tc.rebuilt(eps[0])) || (from && tc.rebuilt(eps[0]))):
					t.Fatalf("not rebuilt for the change: %+v -> %+v", before, eps[0])
				}
			})
		}
	}
}

// Unit: the plugin's own endpoint in a pod's namespace is never taken for
// the CNI's: a pod with hostPorts keeps its endpoint over repeated syncs,
// and is told its ports are the plugin's.
func TestOwnEndpointIsNeverTheCNIs(t *testing.T) {
	rep := &reports{}
	f := newFixture(t, func(o *Options) { o.Reporter = rep; o.Inputs = Inputs{Annotations: true, CRI: true} })
	f.sandbox("s", "")
	f.store.sbs["s"].Metadata = criMeta("", criPorts(1, 1))
	if err := f.startRetrying(Pod{ID: "s", Partial: true}); err != nil {
		t.Fatal(err)
	}
	first := f.endpoints("s")
	if len(first) != 1 {
		t.Fatalf("endpoints %+v", first)
	}
	for range 3 {
		if _, err := f.core.ReconcileAll(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if eps := f.endpoints("s"); len(eps) != 1 || eps[0].ID != first[0].ID {
		t.Fatalf("after resyncs %+v, want %s kept", eps, first[0].ID)
	}
	got, _ := rep.last()
	if got.Endpoint != first[0].ID || len(got.CNI) != 0 {
		t.Fatalf("report %+v: its own endpoint counted as the CNI's", got)
	}
}

// withLimiter makes a fixture's queue wait as lim says between retries.
func withLimiter(lim workqueue.TypedRateLimiter[string]) func(*Options) {
	return func(o *Options) { o.limiter = lim }
}

// skips counts what the core skipped, by reason.
type skips struct {
	nopObserver
	mu  sync.Mutex
	got map[string]int
}

func (s *skips) Skipped(reason string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.got == nil {
		s.got = map[string]int{}
	}
	s.got[reason]++
}

func (s *skips) of(reason string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.got[reason]
}

// Issue 29: containerd's CRI record of a sandbox (its hostPorts) is the
// runtime's, not the pod author's: one that does not decode (a containerd
// whose format changed) never fails the pod, under either failure policy.
// Its annotation is still mapped, its hostPorts are reported unknown (a
// Warning naming the record and the decode error, a metric), and they are
// mapped once the record reads again.
func TestARecordThatDoesNotDecodeNeverFailsThePod(t *testing.T) {
	const bad = `{"Version":"v1","Metadata":{"ID":"s","Config":{"port_mappings":[{"host_port":"9001"}]}}}` // a string where a number was
	for _, tc := range []struct {
		name       string
		annotation string
		failOpen   bool
		partial    bool // the event path: only containerd's record says what the pod is
	}{
		{"annotated pod, fail-open", "8080:80", true, false},
		{"annotated pod, fail-closed", "8080:80", false, false},
		{"pod that asks for nothing", "", false, false},
		{"the event path", "", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep, obs := &reports{}, &skips{}
			f := newFixture(t, func(o *Options) {
				o.Reporter, o.Observer, o.Inputs, o.FailOpen = rep, obs, Inputs{Annotations: true, CRI: true}, tc.failOpen
			})
			p := f.sandbox("s", tc.annotation)
			f.store.sbs["s"].Metadata = []byte(bad)
			if tc.partial {
				p = Pod{ID: "s", Partial: true}
			}
			if err := f.startRetrying(p); err != nil {
				t.Fatalf("the pod failed for containerd's record: %v", err)
			}
			eps := f.endpoints("s")
			if want := min(len(tc.annotation), 1); len(eps) != want {
				t.Fatalf("endpoints %+v, want %d (the annotation's)", eps, want)
			}
			if obs.of(SkipCRIRecordUnreadable) == 0 {
				t.Error("no metric says the record does not decode")
			}
			if !tc.partial {
				got, ok := rep.last()
				if !ok || got.Mapped || got.Reason != ReasonHostPortsUnknown || !strings.Contains(got.Err.Error(), request.ExtensionMetadata) ||
					!strings.Contains(got.Err.Error(), "cannot unmarshal") {
					t.Fatalf("report %+v, want %s naming the record and the decode error", got, ReasonHostPortsUnknown)
				}
				if tc.annotation != "" && got.Endpoint != eps[0].ID {
					t.Fatalf("report %+v does not say the annotation's ports are mapped", got)
				}
			}
			// the record reads again (say, after a fix): the next sync maps the hostPorts
			f.store.mu.Lock()
			f.store.sbs["s"].Metadata = criMeta(tc.annotation, criPorts(1, 1))
			f.store.mu.Unlock()
			if _, err := f.core.ReconcileAll(ctx); err != nil {
				t.Fatal(err)
			}
			eps = f.endpoints("s")
			if len(eps) != 1 || !slices.ContainsFunc(eps[0].PortMappings, func(m hcn.PortMappingPolicy) bool { return m.ExternalPort == 9001 }) {
				t.Fatalf("after the record reads again: %+v, want hostPort 9001 mapped", eps)
			}
		})
	}
}

// Issue 30, 7: a host port HNS says is taken (HCN_E_PORT_ALREADY_EXISTS)
// while no pod of the plugin holds it (another process, a CNI endpoint in
// another namespace, a port HNS kept after a delete) fails the pod as a
// host-port conflict whose text says so and how to see who holds it.
func TestPortHNSHoldsIsAConflictThatSaysWho(t *testing.T) {
	rep := &reports{}
	f := newFixture(t, func(o *Options) { o.Reporter = rep })
	netID, err := f.core.mgr.EnsureNetwork(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.sim.CreateEndpoint(ctx, hcn.EndpointSpec{Name: "someone-else", NetworkID: netID,
		PortMappings: []hcn.PortMappingPolicy{{Protocol: hcn.TCP, ExternalPort: 8080, InternalPort: 80}}}); err != nil {
		t.Fatal(err)
	}
	err = f.core.StartPod(ctx, f.sandbox("p", "8080:80"))
	if !errors.Is(err, hcn.ErrPortInUse) || Classify(err) != ClassConflict {
		t.Fatalf("StartPod = %v (class %s), want the port in use, a conflict", err, Classify(err))
	}
	for _, want := range []string{"pod default/pod-p", "no pod this plugin manages held it", "Get-HnsEndpoint", "kubernetes#137530"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if got, ok := rep.last(); !ok || got.Reason != ReasonConflict {
		t.Errorf("report %+v, want %s", got, ReasonConflict)
	}
}
