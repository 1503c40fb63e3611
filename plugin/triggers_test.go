package plugin

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	networkingv1 "k8s.io/api/networking/v1"
	"sigs.k8s.io/yaml"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/config"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn/hcnsim"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/admission"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/request"
)

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

// A /tasks/start that arrives late, or twice, after the sandbox's
// /tasks/exit does not bring its endpoint back: a stop is final. Both while
// the stop is still being worked on (HNS slow to delete) and after it.
func TestStartAfterStopDoesNotBringTheEndpointBack(t *testing.T) {
	for _, pending := range []bool{false, true} {
		name := "after the stop finished"
		if pending {
			name = "while the stop is pending"
		}
		t.Run(name, func(t *testing.T) {
			f := newFixture(t)
			p := f.eventPod("p", "8080:80")
			if err := startedAndWait(t, f, p); err != nil || len(f.endpoints("p")) != 1 {
				t.Fatalf("start: %v, %+v", err, f.endpoints("p"))
			}
			if pending {
				f.sim.SetOpLatency(hcnsim.OpDeleteEndpoint, 150*time.Millisecond)
			}
			stopDone := f.exited(p.ID)
			if !pending {
				if err := waitResult(t, stopDone); err != nil {
					t.Fatal(err)
				}
			}
			// the late or duplicate start
			startDone := f.started(p.ID)
			if pending {
				if err := waitResult(t, stopDone); err != nil {
					t.Fatal(err)
				}
			}
			select {
			case <-startDone:
			case <-time.After(2 * time.Second): // merged into the stop: told nothing more
			}
			never(t, 300*time.Millisecond, "the endpoint came back after the stop", func() bool { return len(f.endpoints("p")) > 0 })
		})
	}
}

// A stop that HNS makes retry stays a stop when a resync's work for the same
// sandbox arrives meanwhile, even though containerd still lists the task as
// running (the exit event came first).
func TestRetryingStopStaysAStopWhenAResyncArrives(t *testing.T) {
	f := newFixture(t)
	p := f.eventPod("p", "8080:80")
	if err := startedAndWait(t, f, p); err != nil {
		t.Fatal(err)
	}
	if err := f.sim.InjectFault(hcnsim.Fault{Op: hcnsim.OpRemoveNamespaceEndpoint, Kind: "unavailable", Count: 3}); err != nil {
		t.Fatal(err)
	}
	stopDone := f.exited(p.ID)
	eventually(t, "the stop is retrying", func() bool { return f.sim.Calls()[hcnsim.OpRemoveNamespaceEndpoint] >= 1 })
	if _, err := f.core.ReconcileAll(ctx); err != nil { // the resync: containerd lists p, task running
		t.Fatal(err)
	}
	if err := waitResult(t, stopDone); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if _, err := f.core.ReconcileAll(ctx); err != nil {
		t.Fatal(err)
	}
	never(t, 300*time.Millisecond, "the resync brought the stopped sandbox's endpoint back", func() bool { return len(f.endpoints("p")) > 0 })
}

// A task event for a sandbox containerd has already forgotten (or cannot
// tell about right now) still removes its endpoint.
func TestTaskEventForAForgottenSandboxRemovesTheEndpoint(t *testing.T) {
	for _, tc := range []struct {
		name    string
		arrange func(f *fixture)
	}{
		{"containerd forgot it", func(f *fixture) {
			f.store.mu.Lock()
			delete(f.store.sbs, "p")
			f.store.mu.Unlock()
		}},
		{"containerd cannot be asked", func(f *fixture) { f.store.failSandbox = errors.New("containerd: connection refused") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			p := f.eventPod("p", "8080:80")
			if err := startedAndWait(t, f, p); err != nil {
				t.Fatal(err)
			}
			tc.arrange(f)
			if err := stoppedAndWait(t, f, p); err != nil {
				t.Fatalf("stop: %v", err)
			}
			if eps := f.endpoints("p"); len(eps) != 0 {
				t.Fatalf("endpoint left: %+v", eps)
			}
		})
	}
}

// One pod stop on the event path does its HNS and containerd work once,
// however many of the three stop events arrive (containerd 2.x sometimes
// sends no /tasks/delete, so all three are followed): /tasks/exit removes
// the endpoint, /tasks/delete and /containers/delete find nothing left to
// do and ask nobody.
func TestOneStopDoesItsWorkOnce(t *testing.T) {
	f := loaded(t)
	p := f.eventPod("p", "8080:80")
	if err := startedAndWait(t, f, p); err != nil {
		t.Fatal(err)
	}
	lookups := 0
	f.store.hookSandbox(func(string) { lookups++ })
	before := f.sim.Calls()
	for _, ev := range []func(string) <-chan error{f.exited, f.exited, f.deleted} {
		if err := waitResult(t, ev(p.ID)); err != nil {
			t.Fatal(err)
		}
	}
	after := f.sim.Calls()
	total := 0
	for op, n := range after {
		total += n - before[op]
	}
	if total != 2 || after[hcnsim.OpDeleteEndpoint]-before[hcnsim.OpDeleteEndpoint] != 1 || lookups != 0 {
		t.Fatalf("%d HNS calls (%v -> %v) and %d containerd lookups; want detach and delete, once, and no lookup", total, before, after, lookups)
	}
	if c := f.core.st.counts(); c.records != 0 {
		t.Fatalf("the state keeps %+v after containerd deleted the sandbox", c)
	}
}

// 11: a reconcile working from a snapshot re-created the endpoint of a pod
// stopped after the snapshot whose task was already gone while its
// namespace still existed (containerd tears the namespace down last).
func TestStopWinsOverAReconcileThatStartedBefore(t *testing.T) {
	f := newFixture(t)
	p := f.sandbox("p", "8080:80")
	if _, err := f.start(p); err != nil {
		t.Fatal(err)
	}
	snapshot := []Pod{p}                 // what Synchronize listed
	if _, err := f.stop(p); err != nil { // the stop
		t.Fatal(err)
	}
	f.store.mu.Lock()
	f.store.tasks["p"] = TaskUnknown // task deleted, namespace not yet
	f.store.mu.Unlock()
	if _, err := f.core.Reconcile(ctx, snapshot); err != nil {
		t.Fatal(err)
	}
	if eps := f.endpoints("p"); len(eps) != 0 {
		t.Fatalf("the reconcile resurrected %+v", eps)
	}
	if err := f.core.StartPod(ctx, p); err != nil || len(f.endpoints("p")) != 0 {
		t.Fatalf("a late start of the stopped pod: %v, %+v", err, f.endpoints("p"))
	}
	// once containerd forgets the sandbox, so do we
	f.store.mu.Lock()
	delete(f.store.sbs, "p")
	f.store.mu.Unlock()
	if _, err := f.core.ReconcileAll(ctx); err != nil {
		t.Fatal(err)
	}
	if c := f.core.st.counts(); c.tombstones != 0 || c.records != 0 {
		t.Fatalf("the state keeps %+v", c)
	}
}

// 5: a fail-closed start given up on during its backoff wait tried again,
// creating an endpoint only to roll it back.
func TestAbandonedStartDoesNotTryAgain(t *testing.T) {
	f := newFixture(t, retryEvery(150*time.Millisecond))
	f.core.opt.FailOpen = false
	f.core.opt.Deadline = 30 * time.Millisecond
	p := f.sandbox("p", "8080:80")
	if err := f.sim.InjectFault(hcnsim.Fault{Op: hcnsim.OpCreateEndpoint, Kind: "unavailable", Count: 1}); err != nil {
		t.Fatal(err)
	}
	if err := f.core.StartPod(ctx, p); !errors.Is(err, ErrDeadline) {
		t.Fatalf("StartPod = %v, want ErrDeadline", err)
	}
	eventually(t, "the abandoned start ended", func() bool { return !f.core.queued("p") })
	if n := f.sim.Calls()[hcnsim.OpCreateEndpoint]; n != 1 {
		t.Fatalf("CreateEndpoint called %d times, want 1 (no attempt after giving up)", n)
	}
	if eps := f.endpoints("p"); len(eps) != 0 {
		t.Fatalf("left %+v", eps)
	}
}

func TestStartPodSlowHCN(t *testing.T) {
	for _, failOpen := range []bool{true, false} {
		t.Run(fmt.Sprintf("failOpen=%v", failOpen), func(t *testing.T) {
			f := newFixture(t)
			f.core.opt.Deadline = 50 * time.Millisecond
			f.core.opt.FailOpen = failOpen
			p := f.sandbox("slow", "8080:80")
			f.sim.SetLatency(40 * time.Millisecond) // 3+ calls: well past the deadline
			err := f.core.StartPod(ctx, p)
			if failOpen {
				if err != nil {
					t.Fatalf("fail-open StartPod: %v", err)
				}
				eventually(t, "the endpoint completed in the background", func() bool {
					eps := f.endpoints("slow")
					return len(eps) == 1 && eps[0].Namespace != ""
				})
				return
			}
			if !errors.Is(err, ErrDeadline) {
				t.Fatalf("fail-closed StartPod: %v, want ErrDeadline", err)
			}
			// the work still running finishes and is rolled back
			eventually(t, "the abandoned start finished", func() bool { return !f.core.queued("slow") })
			f.core.Close()
			if eps := f.endpoints("slow"); len(eps) != 0 {
				t.Fatalf("fail-closed left %+v", eps)
			}
		})
	}
}

func TestStartPodRetriesTransientFailures(t *testing.T) {
	f := newFixture(t)
	f.core.opt.Deadline = 5 * time.Second
	p := f.sandbox("flaky", "8080:80")
	for _, op := range []string{hcnsim.OpListEndpointsByName, hcnsim.OpCreateEndpoint, hcnsim.OpAddNamespaceEndpoint} {
		if err := f.sim.InjectFault(hcnsim.Fault{Op: op, Kind: "unavailable"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.core.StartPod(ctx, p); err != nil {
		t.Fatalf("StartPod: %v", err)
	}
	if eps := f.endpoints("flaky"); len(eps) != 1 || eps[0].Namespace == "" {
		t.Fatalf("endpoints %+v", eps)
	}
}

// TestStartPodFinalErrorsFailAtOnce: before and after the first listing
// (after it, the state can tell that a sandbox has no endpoint without
// asking HNS).
func TestStartPodFinalErrorsFailAtOnce(t *testing.T) {
	for _, listed := range []bool{false, true} {
		t.Run(fmt.Sprintf("listed=%v", listed), func(t *testing.T) {
			f := loaded
			if !listed {
				f = func(t *testing.T) *fixture { return newFixture(t) }
			}
			testStartPodFinalErrorsFailAtOnce(t, f(t))
		})
	}
}

func testStartPodFinalErrorsFailAtOnce(t *testing.T, f *fixture) {
	pol, err := admission.Compile(testAdmission())
	if err != nil {
		t.Fatal(err)
	}
	f.core.SetAdmission(pol)
	f.core.opt.Deadline = time.Minute // a final error must not wait for it
	tests := []struct {
		pod  Pod
		want error
	}{
		{f.sandbox("rdp", "3389:3389"), admission.ErrDenied},
		{f.sandbox("bad", "80:80/sctp"), ErrInvalidPod},
		{f.sandbox("low", "80:80"), admission.ErrDenied},
	}
	for _, tt := range tests {
		if err := f.core.StartPod(ctx, tt.pod); !errors.Is(err, tt.want) {
			t.Errorf("StartPod(%s) = %v, want %v", tt.pod.Name, err, tt.want)
		}
	}
	if n := len(f.sim.State().Endpoints); n != 0 {
		t.Errorf("%d endpoints for rejected pods", n)
	}
	if n := f.sim.Calls()[hcnsim.OpCreateEndpoint]; n != 0 {
		t.Errorf("HNS asked to create %d endpoints for rejected pods", n)
	}
}

func TestStopPodCancelsRetryingStart(t *testing.T) {
	f := newFixture(t, retryEvery(5*time.Millisecond))
	f.core.opt.Deadline = 20 * time.Millisecond
	f.core.opt.FailOpen = true
	p := f.sandbox("doomed", "8080:80")
	if err := f.sim.InjectFault(hcnsim.Fault{Op: hcnsim.OpCreateEndpoint, Kind: "unavailable", Count: 1 << 20}); err != nil {
		t.Fatal(err)
	}
	if err := f.core.StartPod(ctx, p); err != nil {
		t.Fatal(err)
	}
	// between attempts the start waits in the queue (during one it is
	// out of it): wait for that state rather than look once
	eventually(t, "a start retrying in the background", func() bool { return f.core.queued("doomed") })
	f.core.StopPod(ctx, p)
	eventually(t, "the retrying start was cancelled", func() bool { return !f.core.queued("doomed") })
	f.core.Close()
	if eps := f.endpoints("doomed"); len(eps) != 0 {
		t.Fatalf("endpoints %+v", eps)
	}
}

// A pod start parses the annotation once: what the fast path parsed is what
// the endpoint is built from, even if the pod's annotation map were read
// again later (here it is changed while containerd is asked for the sandbox).
func TestStartPodParsesAnnotationOnce(t *testing.T) {
	f := newFixture(t)
	p := f.sandbox("once", "8080:80")
	f.store.onSandbox = func(string) { p.Annotations[request.AnnotationPortMappings] = "not a mapping" }
	if err := f.core.StartPod(ctx, p); err != nil {
		t.Fatalf("StartPod: %v (the annotation was parsed again)", err)
	}
	eps := f.endpoints(p.ID)
	if len(eps) != 1 || len(eps[0].PortMappings) != 1 || eps[0].PortMappings[0].ExternalPort != 8080 {
		t.Fatalf("endpoints = %+v, want one mapping 8080", eps)
	}
}

// Over the cap, a pod start fails at once, naming the pod, the count and the
// limit, and HNS is not asked for anything.
func TestStartPodOverTheCap(t *testing.T) {
	f := newFixture(t)
	f.core.opt.Limits = request.Limits{MaxMappings: 2, MaxBytes: 64}
	tests := []struct{ name, annotation, want string }{
		{"entries", "8080:80,8081:80,8082:80", "pod default/pod-entries: annotation hcn.nri.io/port-mappings: invalid pod request: 3 entries, more than the limit of 2 (plugin.max_mappings_per_pod)"},
		{"bytes", strings.Repeat(" ", 60) + "8080:80", "pod default/pod-bytes: annotation hcn.nri.io/port-mappings: invalid pod request: 67 bytes, more than the limit of 64 (plugin.max_annotation_bytes)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := f.sandbox(tt.name, tt.annotation)
			f.store.onSandbox = func(string) { t.Error("containerd was asked about a pod rejected on its annotation") }
			err := f.core.StartPod(ctx, p)
			if err == nil || err.Error() != tt.want || !errors.Is(err, ErrInvalidPod) || !errors.Is(err, request.ErrTooLarge) {
				t.Fatalf("StartPod = %v, want %q", err, tt.want)
			}
			if st := f.sim.State(); len(st.Endpoints) != 0 || len(st.Networks) != 0 {
				t.Fatalf("HCN changed: %+v", st)
			}
		})
	}
}

// A pod held back because its namespace's level was not known is mapped as
// soon as the level becomes known, not on its retry timer (here an hour).
func TestAHeldBackPodIsMappedWhenItsNamespaceBecomesKnown(t *testing.T) {
	nss := &namespaces{labels: map[string]string{}}
	f, _ := podSecurityFixture(t, nss, retryEvery(time.Hour))
	p := f.namedPod("late", "shop", "8080:80", "")
	done := f.started(p.ID)
	eventually(t, "the pod held back", func() bool { return f.core.Failing()[ReasonPodSecurityUnknown] == 1 })
	nss.set("shop", "privileged")
	f.core.NamespaceChanged("shop")
	within(t, time.Second, "the held-back pod mapped", func() bool { return len(f.endpoints("late")) == 1 })
	if err := waitResult(t, done); err != nil {
		t.Fatal(err)
	}
}

// Issue 44: a pod its namespace's level refused is synced again at once
// when the namespace is relabelled to allow it (NamespaceChanged), not
// left refused until the next resync: a refusal by Pod Security is the
// namespace's to lift, and its row says the labels decide it.
func TestARelabelMapsThePodItsLevelRefused(t *testing.T) {
	nss := &namespaces{labels: map[string]string{"team": "baseline"}}
	f, _ := podSecurityFixture(t, nss)
	p := f.podIn("web", "team", "8080:80")
	if _, err := f.start(p); !errors.Is(err, admission.ErrPodSecurity) {
		t.Fatalf("start in a baseline namespace: %v, want refused by Pod Security", err)
	}
	never(t, 100*time.Millisecond, "an endpoint for the refused pod", func() bool { return len(f.endpoints("web")) > 0 })
	nss.set("team", "privileged")
	f.core.NamespaceChanged("team")
	eventually(t, "the refused pod mapped once its namespace allows it", func() bool { return len(f.endpoints("web")) == 1 })
	if got := f.core.Failing(); len(got) != 0 {
		t.Fatalf("failing %v once mapped, want none", got)
	}
}

// policies is the cluster's NetworkPolicies as the cache publishes them to
// a core: the test sets them, from the policies' YAML specs.
type policies struct {
	t   *testing.T
	f   *fixture
	now time.Time // the last word heard
	by  map[string][]admission.NetworkPolicy
}

// policyFixture is a core whose admission checks NetworkPolicy
// ("kubernetes"), with no policy yet, the pods' requests read from their
// records (the event path reads them there; NRI is given them whole).
func policyFixture(t *testing.T, opts ...func(*Options)) (*fixture, *policies, *reports) {
	t.Helper()
	a := testAdmission()
	a.NetworkPolicy = config.NetworkPolicyKubernetes
	a.PodSecurity = config.PodSecurityOff // its own tests read labels
	pol, err := admission.Compile(a)
	if err != nil {
		t.Fatal(err)
	}
	rep := &reports{}
	f := newFixture(t, append([]func(*Options){func(o *Options) { o.Admission, o.Reporter = pol, rep }}, opts...)...)
	ps := &policies{t: t, f: f, by: map[string][]admission.NetworkPolicy{}}
	ps.publish(time.Now())
	return f, ps, rep
}

// set makes spec (a NetworkPolicy's YAML spec; "" removes it) namespace
// team's policy name, published, and tells the core.
func (ps *policies) set(name, spec string) {
	ps.t.Helper()
	ps.by["team"] = slices.DeleteFunc(ps.by["team"], func(p admission.NetworkPolicy) bool { return p.Name == name })
	if spec != "" {
		var np networkingv1.NetworkPolicy
		doc := "metadata: {name: " + name + ", namespace: team}\nspec:\n  " + strings.ReplaceAll(spec, "\n", "\n  ")
		if err := yaml.UnmarshalStrict([]byte(doc), &np); err != nil {
			ps.t.Fatal(err)
		}
		c, err := admission.CompileNetworkPolicy(&np)
		if err != nil {
			ps.t.Fatal(err)
		}
		ps.by["team"] = append(slices.Clone(ps.by["team"]), c)
	}
	ps.publish(time.Now())
	ps.f.core.NetworkPoliciesChanged("team")
}

// publish gives the core the policies as heard at heard.
func (ps *policies) publish(heard time.Time) {
	ps.now = heard
	ps.f.core.SetNetworkPolicies(admission.NetworkPolicies{ByNamespace: maps.Clone(ps.by), Heard: heard, KindsHeard: heard, MaxAge: time.Minute})
}

// webPod is a running sandbox of namespace team labelled app=web, whose
// record asks 9500:80.
func webPod(f *fixture, id string) Pod {
	p := f.sandbox(id, "9500:80")
	p.Namespace, p.Labels = "team", map[string]string{"app": "web"}
	f.store.mu.Lock()
	f.store.sbs[id].Metadata = []byte(`{"Version":"v1","Metadata":{"ID":"x","Name":"` + p.Name + `","Config":{"metadata":{"name":"` + p.Name +
		`","uid":"uid","namespace":"team"},"labels":{"app":"web"},"annotations":{"` + request.AnnotationPortMappings + `":"9500:80"}}}}`)
	f.store.mu.Unlock()
	return p
}

const (
	denyAll   = "podSelector: {}\npolicyTypes: [Ingress]"
	onlyFrom  = "podSelector: {matchLabels: {app: web}}\ningress: [{from: [{podSelector: {matchLabels: {role: client}}}]}]"
	allowPort = "podSelector: {}\ningress: [{ports: [{port: 80}]}]"
)

// Issue 52: a host port never lets in what the pod's NetworkPolicy keeps
// out, on both paths: a pod whose policy admits only role=client is not
// mapped at its start (the pod itself starts: RunPodSandbox is not
// failed), told why naming the policy; a policy that admits every source
// to the port maps it without a restart; one created later that isolates
// it unmaps it.
func TestAHostPortNeverLetsInWhatThePodsNetworkPolicyKeepsOut(t *testing.T) {
	for _, path := range startPaths {
		t.Run(path.name, func(t *testing.T) {
			f, ps, rep := policyFixture(t)
			ps.set("clients", onlyFrom)
			p := webPod(f, "web")
			if path.name == "nri" {
				if err := f.core.StartPod(ctx, p); err != nil {
					t.Fatalf("RunPodSandbox failed: %v; want the pod started without its host port", err)
				}
			} else {
				waitResult(t, path.start(f, p))
			}
			var npe *admission.NetworkPolicyError
			if err := f.core.st.lastErr("web"); !errors.As(err, &npe) || npe.Policies[0] != "team/clients" {
				t.Fatalf("the start: %v, want refused naming team/clients", err)
			}
			if r, ok := rep.last(); !ok || r.Reason != ReasonNetworkPolicy || f.core.Failing()[ReasonNetworkPolicy] != 1 {
				t.Fatalf("told %+v, failing %v: want %s", r, f.core.Failing(), ReasonNetworkPolicy)
			}
			never(t, 50*time.Millisecond, "an endpoint for the isolated pod", func() bool { return len(f.endpoints("web")) > 0 })
			ps.set("open-80", allowPort) // widened: every source to port 80
			eventually(t, "mapped once a policy admits every source to its port", func() bool {
				eps := f.endpoints("web")
				return len(eps) == 1 && eps[0].Namespace != ""
			})
			ps.set("open-80", "")
			ps.set("deny", denyAll)
			eventually(t, "unmapped once a policy isolates it", func() bool {
				return len(f.endpoints("web")) == 0 && errors.Is(f.core.st.lastErr("web"), admission.ErrNetworkPolicy)
			})
			if r, _ := rep.last(); r.Mapped || r.Reason != ReasonNetworkPolicy {
				t.Fatalf("told %+v after the unmapping: want %s", r, ReasonNetworkPolicy)
			}
		})
	}
}

// What the plugin cannot know grants nothing: policies heard too long ago
// unmap the pods mapped meanwhile, as soon as the cache says so, and a
// word heard again maps them back.
func TestPoliciesHeardTooLongAgoUnmapThePodsInPlace(t *testing.T) {
	f, ps, _ := policyFixture(t)
	p := webPod(f, "web")
	if err := startedAndWait(t, f, p); err != nil {
		t.Fatal(err)
	}
	if len(f.endpoints("web")) != 1 {
		t.Fatal("not mapped while no policy selects it")
	}
	ps.publish(time.Now().Add(-2 * time.Minute)) // the cache ages out: nothing heard for longer than the bound
	f.core.NetworkPoliciesChanged("")
	eventually(t, "unmapped, the policies unknown", func() bool {
		return len(f.endpoints("web")) == 0 && errors.Is(f.core.st.lastErr("web"), admission.ErrNetworkPolicyUnknown)
	})
	ps.publish(time.Now())
	f.core.NetworkPoliciesChanged("")
	eventually(t, "mapped again once heard", func() bool { return len(f.endpoints("web")) == 1 })
}

// A policy change racing a start: the start ends mapped only if the
// policy in force when its endpoint lands admits it.
func TestAPolicyThatChangesDuringAStartDecidesIt(t *testing.T) {
	for _, path := range startPaths {
		t.Run(path.name, func(t *testing.T) {
			f, ps, _ := policyFixture(t)
			p := webPod(f, "web")
			f.sim.SetOpLatency(hcnsim.OpCreateEndpoint, 200*time.Millisecond)
			done := path.start(f, p)
			eventually(t, "the create is in HNS", func() bool { return f.sim.Calls()[hcnsim.OpCreateEndpoint] == 1 })
			ps.by["team"] = []admission.NetworkPolicy{} // published only: no namespace told, the race alone decides
			ps.set("deny", denyAll)
			waitResult(t, done)
			eventually(t, "the pod ends unmapped", func() bool {
				return len(f.endpoints("web")) == 0 && errors.Is(f.core.st.lastErr("web"), admission.ErrNetworkPolicy)
			})
		})
	}
}

// TestOneStartIsMappedAndReportedOnce is the trip docs/development.md
// counts (make trip traces it): containerd's start of an annotated pod
// whose record has its DNS, in a privileged namespace, with the default
// configuration: one read of containerd, one of the node's sockets, the
// endpoint made with the pod's DNS, one report saying it is mapped.
func TestOneStartIsMappedAndReportedOnce(t *testing.T) {
	nss := &namespaces{labels: map[string]string{"ns": "privileged"}}
	f, rep := podSecurityFixture(t, nss)
	if err := f.core.LoadPorts(ctx); err != nil { // the start-up listing: the network known
		t.Fatal(err)
	}
	f.sandbox("sb1", "")
	f.store.mu.Lock()
	f.store.sbs["sb1"].Metadata = criMetaDNS("8080:80", "10.0.0.10")
	f.store.mu.Unlock()
	before := f.sim.Calls()

	f.core.Started("sb1")
	eventually(t, "the pod's report", func() bool { _, ok := rep.last(); return ok })

	r, _ := rep.last()
	eps := f.endpoints("sb1")
	switch {
	case !r.Mapped || r.Err != nil || len(r.Policies) != 1 || r.Policies[0].ExternalPort != 8080:
		t.Fatalf("report %+v, want mapped 8080", r)
	case len(eps) != 1 || len(eps[0].DNS.ServerList) == 0 || eps[0].DNS.ServerList[0] != "10.0.0.10":
		t.Fatalf("endpoints %+v, want one with the pod's DNS", eps)
	case !maps.Equal(callsSince(before, f.sim.Calls()), map[string]int{hcnsim.OpCreateEndpoint: 1, hcnsim.OpAddNamespaceEndpoint: 1}):
		t.Fatalf("HNS calls %v, want the create and the attach alone", callsSince(before, f.sim.Calls()))
	case f.store.calls()["containerd.Sandbox"] != 1:
		t.Fatalf("containerd read %v, want the record once", f.store.calls())
	case f.core.opt.Sockets.(*hostTable).count() != 1:
		t.Fatalf("the node's sockets read %d times, want once", f.core.opt.Sockets.(*hostTable).count())
	}
	never(t, 50*time.Millisecond, "a second report", func() bool { rep.mu.Lock(); defer rep.mu.Unlock(); return len(rep.got) > 1 })
}
