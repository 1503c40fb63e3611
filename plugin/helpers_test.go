package plugin

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	"k8s.io/client-go/util/workqueue"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/config"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn/hcnsim"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/admission"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/hostsockets"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/request"
)

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
	old := f.core
	f.core = NewCore(hcn.NewManager(f.sim, cfg), f.store, o, f.core.log)
	if l := old.labels.Load(); l != nil { // the watch publishes to the new process at once
		f.core.SetLabels(*l)
	}
	t.Cleanup(f.core.Close)
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

func mustParse(t *testing.T, s string) []request.PortMapping {
	t.Helper()
	ms, err := request.ParsePortMappings(s, request.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	return ms
}

func criMeta(annotation, portMappings string) []byte {
	return criMetaWith(annotation, portMappings, "")
}

// criMetaWith is criMeta's record with the pod's DNS resolver server, as
// kubelet gives it ("": a record without DNS).
func criMetaWith(annotation, portMappings, server string) []byte {
	ann, dns := "", ""
	if annotation != "" {
		ann = `,"annotations":{"` + request.AnnotationPortMappings + `":"` + annotation + `"}`
	}
	if server != "" {
		dns = `,"dns_config":{"servers":["` + server + `"],"searches":["ns.svc.cluster.local"]}`
	}
	return []byte(`{"Version":"v1","Metadata":{"ID":"x","Name":"p_ns_uid_0","Config":{"metadata":{"name":"p","uid":"uid","namespace":"ns"},"port_mappings":[` +
		portMappings + `]` + dns + ann + `}}}`)
}

// criMetaDNS is criMeta's record with the pod's DNS, as kubelet gives it.
func criMetaDNS(annotation, server string) []byte {
	ann := ""
	if annotation != "" {
		ann = `,"annotations":{"` + request.AnnotationPortMappings + `":"` + annotation + `"}`
	}
	return []byte(`{"Version":"v1","Metadata":{"ID":"x","Name":"p_ns_uid_0","Config":{"metadata":{"name":"p","uid":"uid","namespace":"ns"},` +
		`"dns_config":{"servers":["` + server + `"],"searches":["ns.svc.cluster.local"]}` + ann + `}}}`)
}

// criPorts returns CRI port_mappings for host ports 9000+from .. 9000+to.
func criPorts(from, to int) string {
	var parts []string
	for i := from; i <= to; i++ {
		parts = append(parts, fmt.Sprintf(`{"container_port":80,"host_port":%d}`, 9000+i))
	}
	return strings.Join(parts, ",")
}

// reports records what the core tells pods' owners.
type reports struct {
	mu  sync.Mutex
	got []PodReport
}

func (r *reports) Report(rep PodReport) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, rep)
}

func (r *reports) last() (PodReport, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.got) == 0 {
		return PodReport{}, false
	}
	return r.got[len(r.got)-1], true
}

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
	// reads counts the calls made, by method
	reads map[string]int
}

// read counts a call (s.mu held).
func (s *memStore) read(method string) {
	if s.reads == nil {
		s.reads = map[string]int{}
	}
	s.reads[method]++
}

// calls is what was read of containerd so far, by method.
func (s *memStore) calls() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.reads)
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
	s.read("containerd.Sandbox")
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
	s.read("containerd.ListSandboxes")
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
	s.read("containerd.TaskState")
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
	t.Cleanup(f.closeAndWait(t))
	return f
}

// closeAndWait closes the core at the end of its test and waits for every
// sync and background task it runs to end: work left running would act
// and log after its test is over (a panic, or a failure charged to
// whatever test runs then). Work that outlives the guard fails the test.
func (f *fixture) closeAndWait(t *testing.T) func() {
	return func() {
		f.core.Close()
		done := make(chan struct{})
		go func() {
			f.core.workers.Wait()
			f.core.bgWork.Wait()
			close(done)
		}()
		select {
		case <-done:
		case <-time.After(20 * time.Second): // a guard, not a timing target
			t.Error("the core's work was still running 20s after its test ended")
		}
	}
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
	o.Sockets = &hostTable{} // the node's own sockets: none, not the test machine's
	return o
}

// hostTable is the node's own sockets as a test sets them: a
// hostsockets.Reader that counts its reads.
type hostTable struct {
	mu    sync.Mutex
	socks []hostsockets.Socket
	reads int
}

func (h *hostTable) On(_ context.Context, ports []hostsockets.Port) ([]hostsockets.Socket, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.reads++
	var out []hostsockets.Socket
	for _, s := range h.socks {
		if slices.Contains(ports, hostsockets.Port{Protocol: s.Protocol, Port: s.Port}) {
			out = append(out, s)
		}
	}
	return out, nil
}

func (h *hostTable) set(socks ...hostsockets.Socket) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.socks = socks
}

func (h *hostTable) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.reads
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

// startedAndWait hands the core a start seen on containerd's event stream
// and waits for its final result.
func startedAndWait(t *testing.T, f *fixture, p Pod) error {
	t.Helper()
	return waitResult(t, f.started(p.ID))
}

// stoppedAndWait hands the core a stop seen on containerd's event stream
// (a task exit: the ID may name an application container) and waits.
func stoppedAndWait(t *testing.T, f *fixture, p Pod) error {
	t.Helper()
	return waitResult(t, f.exited(p.ID))
}

func waitResult(t *testing.T, done <-chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(20 * time.Second): // a guard against a hang, not a timing target
		t.Fatal("the work never reported a result")
		return nil
	}
}

// never fails the test if cond becomes true at any poll over d: "nothing
// happens" holds over a window, not on one look.
func never(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		if cond() {
			t.Fatalf("%s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// eventPod is a sandbox whose request containerd's CRI record holds (the
// event path reads it from there).
func (f *fixture) eventPod(id, annotation string) Pod {
	p := f.sandbox(id, annotation)
	f.store.mu.Lock()
	f.store.sbs[id].Metadata = criMeta(annotation, "")
	f.store.mu.Unlock()
	return p
}

// event hands the core a containerd event (what Started, Exited or Deleted
// sees) and returns where its final outcome arrives.
func (f *fixture) event(seen sighting) <-chan error {
	results := make(chan result, 1)
	seen.wait.ch = results
	f.core.enqueue(seen.pod.ID, seen)
	done := make(chan error, 1)
	go func() {
		select {
		case r := <-results:
			done <- r.err
		case <-f.core.closed:
			done <- ErrClosed
		}
	}()
	return done
}

func (f *fixture) started(id string) <-chan error { return f.event(startedEvent(id)) }

func (f *fixture) exited(id string) <-chan error { return f.event(exitedEvent(id)) }

func (f *fixture) deleted(id string) <-chan error { return f.event(deletedEvent(id)) }

// counts is what the state holds.
type counts struct{ records, holding, tombstones int }

func (s *state) counts() counts {
	s.mu.Lock()
	defer s.mu.Unlock()
	var c counts
	for _, r := range s.recs {
		c.records++
		if len(r.known.ports) > 0 {
			c.holding++
		}
		if r.in.stopped || r.known.final {
			c.tombstones++
		}
	}
	return c
}

// queued reports whether a sync of the sandbox is due (a trigger it has not
// seen), waited for, or retrying (the queue's count).
func (c *Core) queued(id string) bool {
	if c.q.NumRequeues(id) > 0 {
		return true
	}
	c.st.mu.Lock()
	defer c.st.mu.Unlock()
	r := c.st.recs[id]
	return r != nil && (len(r.in.waiters) > 0 || r.in.gen > r.known.synced)
}

// waiting reports whether a request waits for the sandbox's sync.
func (c *Core) waiting(id string) bool {
	c.st.mu.Lock()
	defer c.st.mu.Unlock()
	r := c.st.recs[id]
	return r != nil && len(r.in.waiters) > 0
}

// namespaces is what the API server said of the namespaces' enforce
// labels, changed by the test ("-": no label; absent: never read), and
// published to the core as package kube publishes them.
type namespaces struct {
	mu     sync.Mutex
	labels map[string]string
	f      *fixture // its core, as of now (a restart replaces it)
}

func (n *namespaces) publish() {
	l := admission.Labels{Enforce: map[string]admission.Label{}, Heard: time.Now(), MaxAge: time.Hour}
	for ns, v := range n.labels {
		l.Enforce[ns] = admission.Label{Value: v, Labelled: v != "-"}
	}
	n.f.core.SetLabels(l)
}

func (n *namespaces) set(ns, label string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.labels[ns] = label
	n.publish()
}

// podSecurityFixture is a core with the default admission policy (Pod
// Security enforced, unlabelled namespaces privileged) over nss.
func podSecurityFixture(t *testing.T, nss *namespaces, opts ...func(*Options)) (*fixture, *reports) {
	t.Helper()
	pol, err := admission.Compile(testAdmission())
	if err != nil {
		t.Fatal(err)
	}
	rep := &reports{}
	f := newFixture(t, append([]func(*Options){func(o *Options) {
		o.Admission, o.Reporter = pol, rep
	}}, opts...)...)
	nss.mu.Lock()
	nss.f = f
	nss.publish()
	nss.mu.Unlock()
	return f, rep
}

func (f *fixture) podIn(id, namespace, annotation string) Pod {
	p := f.sandbox(id, annotation)
	p.Namespace = namespace
	return p
}

func pp(proto hcn.Protocol, port uint16, vip string, flags hcn.NatFlags) hcn.PortMappingPolicy {
	return hcn.PortMappingPolicy{Protocol: proto, ExternalPort: port, InternalPort: 80, VIP: vip, Flags: flags}
}

// hold commits, as a sync of id would, that id holds policies.
func hold(x *state, id, name string, policies []hcn.PortMappingPolicy) {
	x.trigger(id, sighting{})
	sn, _ := x.snapshot(id, 1)
	k := sn.known
	k.ports, k.name, k.epsKnown = policies, name, true
	if len(policies) > 0 {
		k.eps = []hcn.Endpoint{{ID: "E" + id, PortMappings: policies}}
	} else {
		k.eps = nil
	}
	x.commit(id, sn, k, false)
}

func eventually(t *testing.T, what string, f func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !f() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// loaded is a fixture whose state has taken its first listing of HNS, as
// after start-up: only then does it know that a sandbox has no endpoint
// without asking HNS.
func loaded(t *testing.T) *fixture {
	t.Helper()
	f := newFixture(t)
	f.core.opt.Deadline = 5 * time.Second
	if err := f.core.LoadPorts(ctx); err != nil {
		t.Fatal(err)
	}
	return f
}

// criRecord is containerd's CRI record of a pod named namespace/name
// whose annotation is annotation and whose hostPorts are portMappings (CRI
// port_mappings JSON).
func criRecord(name, namespace, annotation, portMappings string) []byte {
	ann := ""
	if annotation != "" {
		ann = `,"annotations":{"` + request.AnnotationPortMappings + `":"` + annotation + `"}`
	}
	return []byte(`{"Version":"v1","Metadata":{"ID":"x","Name":"` + name + `","Config":{"metadata":{"name":"` + name +
		`","uid":"uid-` + name + `","namespace":"` + namespace + `"},"port_mappings":[` + portMappings + `]` + ann + `}}}`)
}

// namedPod is a running sandbox whose CRI record names its pod as the
// whole Pod returned does (the event path reads it from there, NRI is
// given it).
func (f *fixture) namedPod(id, namespace, annotation, portMappings string) Pod {
	p := f.sandbox(id, annotation)
	p.Namespace = namespace
	f.store.mu.Lock()
	f.store.sbs[id].Metadata = criRecord(p.Name, namespace, annotation, portMappings)
	f.store.mu.Unlock()
	return p
}

// hostIPs sets admission.host_ips.
func hostIPs(ips ...string) func(*Options) {
	return func(o *Options) {
		a := testAdmission()
		a.HostIPs = ips
		pol, err := admission.Compile(a)
		if err != nil {
			panic(err)
		}
		o.Admission = pol
	}
}

// within fails the test unless cond holds within d.
func within(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	end := time.Now().Add(d)
	for !cond() {
		if time.Now().After(end) {
			t.Fatalf("not within %s: %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// startPaths are the two ways a pod's start reaches the core, each giving
// where the outcome of its first attempt arrives: the runtime's
// RunPodSandbox (NRI), and containerd's /tasks/start (the event path,
// which reads the pod from its record).
var startPaths = []struct {
	name  string
	start func(f *fixture, p Pod) <-chan error
	stop  func(f *fixture, p Pod) <-chan error
}{
	{"nri", func(f *fixture, p Pod) <-chan error {
		done := make(chan error, 1)
		go func() { _, err := f.start(p); done <- err }()
		return done
	}, func(f *fixture, p Pod) <-chan error {
		done := make(chan error, 1)
		go func() { _, err := f.stop(p); done <- err }()
		return done
	}},
	{"events", func(f *fixture, p Pod) <-chan error {
		seen := startedEvent(p.ID)
		seen.wait.first = true
		return f.event(seen)
	}, func(f *fixture, p Pod) <-chan error {
		seen := exitedEvent(p.ID)
		seen.wait.first = true
		return f.event(seen)
	}},
}

// admitting is a fixture option: the default admission rules without
// the Pod Security check (the annotation needs no labels), deny added.
func admitting(deny ...string) func(*Options) {
	return func(o *Options) { o.Admission = rules(deny...) }
}

// rules is the default admission policy without the Pod Security check,
// with deny added to its deny list.
func rules(deny ...string) *admission.Policy {
	a := testAdmission()
	a.PodSecurity, a.PodSecurityDefaultLevel = config.PodSecurityOff, config.LevelPrivileged
	a.Deny = append(a.Deny, deny...)
	pol, err := admission.Compile(a)
	if err != nil {
		panic(err)
	}
	return pol
}

// bounded makes a fixture's HNS calls give up after d, as hcn.call_timeout
// makes them (the call still takes effect when the simulator's latency
// has passed, as HNS finishes what it started).
func bounded(t *testing.T, f *fixture, d time.Duration) {
	t.Helper()
	f.core.Close()
	f.core = NewCore(hcn.NewManager(hcn.Bounded(f.sim, d), testManagerConfig()), f.store, f.core.opt, f.core.log)
	t.Cleanup(f.core.Close)
}

// testAdmission is the default admission rules without the NetworkPolicy
// check: the tests of other rules run no NetworkPolicy cache (the check's
// own tests publish policies).
func testAdmission() config.Admission {
	a := config.DefaultAdmission()
	a.NetworkPolicy = config.NetworkPolicyOff
	return a
}

// callsSince is the HNS calls made between two counts of the simulator's.
func callsSince(before, after map[string]int) map[string]int {
	out := map[string]int{}
	for op, n := range after {
		if d := n - before[op]; d > 0 {
			out[op] = d
		}
	}
	return out
}
