package plugin

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/config"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn/hcnsim"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/request"
)

var ctx = context.Background()

// memStore stands in for containerd in unit tests (the e2e tests use a real
// containerd).
type memStore struct {
	mu    sync.Mutex
	sbs   map[string]*SandboxInfo
	tasks map[string]TaskState
	// onSandbox, when set, runs on every Sandbox lookup (outside the lock).
	onSandbox func(id string)
	// onList, when set, runs on every ListSandboxes (outside the lock).
	onList func()
	// failSandbox, when set, is every Sandbox lookup's error (containerd
	// unreachable).
	failSandbox error
}

// hookSandbox sets onSandbox while the core may be reading it.
func (s *memStore) hookSandbox(fn func(id string)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.onSandbox = fn
}

func (s *memStore) Sandbox(_ context.Context, id string) (*SandboxInfo, error) {
	s.mu.Lock()
	hook := s.onSandbox
	s.mu.Unlock()
	if hook != nil {
		hook(id)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failSandbox != nil {
		return nil, s.failSandbox
	}
	sb, ok := s.sbs[id]
	if !ok {
		return nil, ErrSandboxNotFound
	}
	c := *sb
	return &c, nil
}

func (s *memStore) ListSandboxes(context.Context) ([]string, error) {
	s.mu.Lock()
	hook := s.onList
	s.mu.Unlock()
	if hook != nil {
		hook()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var ids []string
	for id, sb := range s.sbs {
		if sb.IsSandbox {
			ids = append(ids, id)
		}
	}
	return ids, nil
}

func (s *memStore) TaskState(_ context.Context, id string) (TaskState, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tasks[id], nil
}

type fixture struct {
	sim   *hcnsim.Sim
	store *memStore
	core  *Core
}

// newFixture is a core over the simulator and memStore; opts change its
// options before it is made.
func newFixture(t *testing.T, opts ...func(*Options)) *fixture {
	t.Helper()
	sim := hcnsim.New()
	mgr := hcn.NewManager(sim, testManagerConfig())
	store := &memStore{sbs: map[string]*SandboxInfo{}, tasks: map[string]TaskState{}}
	log := logrus.New()
	log.SetOutput(testWriter{t})
	o := testOptions(t)
	for _, fn := range opts {
		fn(&o)
	}
	f := &fixture{sim: sim, store: store, core: NewCore(mgr, store, o, logrus.NewEntry(log))}
	t.Cleanup(f.core.Close)
	return f
}

// testOptions are the options of the default configuration with the
// annotation as the only source, no admission policy and fast retries.
func testOptions(t *testing.T) Options {
	t.Helper()
	o, err := OptionsFrom(config.Default())
	if err != nil {
		t.Fatal(err)
	}
	o.Inputs, o.Admission = Inputs{Annotations: true}, nil
	o.RetryMin, o.RetryMax = time.Millisecond, 5*time.Millisecond
	return o
}

// testManagerConfig is the manager of the default configuration.
func testManagerConfig() hcn.ManagerConfig { return ManagerConfig(config.Default().HCN) }

// retryEvery makes a fixture retry failed syncs every d.
func retryEvery(d time.Duration) func(*Options) {
	return func(o *Options) { o.RetryMin, o.RetryMax = d, d }
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// sandbox adds a running sandbox with its own HCN namespace and returns its pod.
func (f *fixture) sandbox(id, annotation string) Pod {
	ns := f.sim.CreateNamespace("")
	f.store.mu.Lock()
	f.store.sbs[id] = &SandboxInfo{ID: id, IsSandbox: true, NetNS: ns}
	f.store.tasks[id] = TaskRunning
	f.store.mu.Unlock()
	p := Pod{ID: id, Name: "pod-" + id, Namespace: "default"}
	if annotation != "" {
		p.Annotations = map[string]string{request.AnnotationPortMappings: annotation}
	}
	return p
}

func (f *fixture) endpoints(id string) []hcn.Endpoint {
	var out []hcn.Endpoint
	for _, ep := range f.sim.State().Endpoints {
		if ep.Name == f.core.mgr.EndpointName(id) {
			out = append(out, ep)
		}
	}
	return out
}

// start is the runtime's RunPodSandbox without its deadline: the trigger
// StartPod records, and the outcome of the sync's first attempt.
func (f *fixture) start(p Pod) (Change, error) {
	ch, err, _ := f.core.await(ctx, p.ID, sighting{pod: &p, start: true, claim: true}, true)
	return ch, err
}

// startRetrying is start waiting for the final outcome (after the retries
// of failures that pass), as an event's start does.
func (f *fixture) startRetrying(p Pod) error {
	_, err, _ := f.core.await(ctx, p.ID, sighting{pod: &p, start: true, claim: true}, false)
	return err
}

// stop is the runtime's StopPodSandbox without its deadline: the outcome of
// the sync's first attempt.
func (f *fixture) stop(p Pod) (Change, error) {
	ch, err, _ := f.core.await(ctx, p.ID, sighting{pod: &p, stop: true, claim: true}, true)
	return ch, err
}

func TestEnsureCases(t *testing.T) {
	f := newFixture(t)
	mapped := f.sandbox("mapped", "8080:80,53:53/udp")
	if r, err := f.start(mapped); err != nil || r != Built {
		t.Fatalf("Ensure(mapped) = %v, %v", r, err)
	}
	eps := f.endpoints("mapped")
	if len(eps) != 1 || len(eps[0].PortMappings) != 2 || eps[0].Namespace != f.store.sbs["mapped"].NetNS {
		t.Fatalf("mapped pod endpoints: %+v", eps)
	}
	if r, err := f.start(mapped); err != nil || r != Kept {
		t.Fatalf("second Ensure = %v, %v; want unchanged", r, err)
	}

	unmapped := f.sandbox("unmapped", "")
	if r, err := f.start(unmapped); err != nil || r != NoChange || len(f.endpoints("unmapped")) != 0 {
		t.Fatalf("Ensure(unmapped) = %v, %v", r, err)
	}

	linux := f.sandbox("linux", "8081:80")
	f.store.sbs["linux"].NetNS = ""
	if r, err := f.start(linux); err != nil || r != NoChange || len(f.endpoints("linux")) != 0 {
		t.Fatalf("Ensure(no Windows namespace) = %v, %v; want skipped", r, err)
	}

	bad := f.sandbox("bad", "8082:80,0:1")
	_, err := f.start(bad)
	if !errors.Is(err, ErrInvalidPod) || !strings.Contains(err.Error(), "default/pod-bad") || !strings.Contains(err.Error(), `"0:1"`) {
		t.Fatalf("Ensure(bad) = %v", err)
	}
	if len(f.endpoints("bad")) != 0 {
		t.Fatal("a rejected pod got an endpoint")
	}

	ghost := Pod{ID: "ghost", Annotations: map[string]string{request.AnnotationPortMappings: "9000:80"}}
	if _, err := f.start(ghost); !errors.Is(err, ErrSandboxNotFound) {
		t.Fatalf("Ensure(unknown sandbox) = %v", err)
	}

	clash := f.sandbox("clash", "8080:8080")
	_, err = f.start(clash)
	if !errors.Is(err, ErrPortConflict) || !strings.Contains(err.Error(), "already held by pod default/pod-mapped") || len(f.endpoints("clash")) != 0 {
		t.Fatalf("Ensure(port held by another pod) = %v", err)
	}
	if n := f.sim.Calls()[hcnsim.OpCreateEndpoint]; n != 1 {
		t.Errorf("HNS was asked to create %d endpoints; the conflict must be caught before HNS", n)
	}

	if r, err := f.stop(mapped); err != nil || r != Removed || len(f.endpoints("mapped")) != 0 {
		t.Fatalf("Remove = %v, %v", r, err)
	}
	if r, err := f.stop(mapped); err != nil || r != NoChange {
		t.Fatalf("second Remove = %v, %v", r, err)
	}
}

func TestReconcile(t *testing.T) {
	f := newFixture(t)
	// a: running, listed, no endpoint yet (started while we were down)
	a := f.sandbox("a", "8080:80")
	// b: listed but stopped while we were down: namespace gone
	b := f.sandbox("b", "8081:80")
	if _, err := f.start(b); err != nil {
		t.Fatal(err)
	}
	if err := f.sim.DeleteNamespace(f.store.sbs["b"].NetNS); err != nil {
		t.Fatal(err)
	}
	// c: endpoint left, sandbox gone from containerd and from the list
	c := f.sandbox("c", "8082:80")
	if _, err := f.start(c); err != nil {
		t.Fatal(err)
	}
	delete(f.store.sbs, "c")
	// d: running with an endpoint but not in the list: left alone (its
	// request is what its start told the controller)
	d := f.sandbox("d", "8083:80")
	if _, err := f.start(d); err != nil {
		t.Fatal(err)
	}
	// e: listed, task stopped (namespace still there): endpoint removed
	e := f.sandbox("e", "8084:80")
	if _, err := f.start(e); err != nil {
		t.Fatal(err)
	}
	f.store.tasks["e"] = TaskStopped
	// g: listed, unchanged
	g := f.sandbox("g", "8085:80")
	if _, err := f.start(g); err != nil {
		t.Fatal(err)
	}
	// h: listed with a bad annotation: reported, nothing created
	h := f.sandbox("h", "nope")

	sum, err := f.core.Reconcile(ctx, []Pod{a, b, e, g, h})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{"a": 1, "b": 0, "c": 0, "d": 1, "e": 0, "g": 1, "h": 0}
	for id, n := range want {
		if got := len(f.endpoints(id)); got != n {
			t.Errorf("sandbox %s: %d endpoints, want %d", id, got, n)
		}
	}
	if sum.Created != 1 || sum.Deleted != 3 || sum.Unchanged != 2 || sum.Failed != 1 {
		t.Errorf("summary = %+v, want 1 created, 3 deleted, 2 unchanged (d, g), 1 failed", sum)
	}
	if len(sum.Errors) != 1 || !errors.Is(sum.Errors[0], ErrInvalidPod) {
		t.Errorf("errors = %v", sum.Errors)
	}
}

func TestReconcileSurvivesHCNFaults(t *testing.T) {
	f := newFixture(t)
	var pods []Pod
	for _, id := range []string{"p1", "p2", "p3", "p4"} {
		pods = append(pods, f.sandbox(id, "")) // annotations filled below
	}
	for i := range pods {
		pods[i].Annotations = map[string]string{request.AnnotationPortMappings: string(rune('1'+i)) + "000:80"}
	}
	for _, op := range []string{hcnsim.OpCreateEndpoint, hcnsim.OpAddNamespaceEndpoint} {
		if err := f.sim.InjectFault(hcnsim.Fault{Op: op, Kind: "internal"}); err != nil {
			t.Fatal(err)
		}
	}
	sum, err := f.core.Reconcile(ctx, pods)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Failed != 2 || sum.Created != 2 {
		t.Fatalf("first pass %+v, want 2 failed, 2 created", sum)
	}
	// the queue retries what failed, whatever the trigger: the failures
	// are repaired without another reconcile
	eventually(t, "the two failures repaired by the queue's retries", func() bool {
		eps := 0
		for _, ep := range f.sim.State().Endpoints {
			if ep.Namespace != "" {
				eps++
			}
		}
		return eps == 4
	})
	sum, err = f.core.Reconcile(ctx, pods)
	if err != nil || sum.Failed != 0 || sum.Unchanged != 4 {
		t.Fatalf("second pass %+v, %v; want all four in place", sum, err)
	}
	if n := len(f.sim.State().Endpoints); n != 4 {
		t.Fatalf("%d endpoints, want 4", n)
	}
}

// TestSamePodSerialized races starts and stops of one pod: syncs of one
// sandbox never overlap, so HCN never ends with two endpoints or a port
// conflict error; and a stop is final, so once the races are over the
// sandbox (stopped at least once) has no endpoint.
func TestSamePodSerialized(t *testing.T) {
	f := newFixture(t)
	p := f.sandbox("race", "8080:80")
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for i := range 64 {
		wg.Go(func() {
			var err error
			if i%3 == 0 {
				_, err = f.stop(p)
			} else {
				_, err = f.start(p)
			}
			if err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := len(f.endpoints("race")); n != 0 {
		t.Errorf("%d endpoints for a stopped pod", n)
	}
}

func TestABadAnnotationsErrorNamesPodAndAnnotation(t *testing.T) {
	f := newFixture(t)
	p := f.podIn("abc", "shop", "8080:80/sctp")
	p.Name = "web"
	_, err := f.start(p)
	if err == nil {
		t.Fatal("want an error")
	}
	for _, w := range []string{"shop/web", request.AnnotationPortMappings, "8080:80/sctp", "SCTP"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not mention %q", err, w)
		}
	}
	if !errors.Is(err, ErrInvalidPod) || !errors.Is(err, request.ErrBadMapping) {
		t.Errorf("error %v should wrap ErrInvalidPod and request.ErrBadMapping", err)
	}
}
