package kube

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/config"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/sirupsen/logrus"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin"
)

type counts struct {
	mu      sync.Mutex
	dropped int
	reports map[string]int
}

func (c *counts) KubeReport(what, result string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reports[what+"/"+result]++
}

func (c *counts) KubeDropped() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.dropped++
}

func (c *counts) get(k string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.reports[k]
}

func (c *counts) snapshot() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]int{}
	for k, v := range c.reports {
		out[k] = v
	}
	return out
}

// TestQueueDropsTheOldest: reports wait in a bounded queue; when it is full
// the oldest goes, counted, and Report never blocks (no API server runs
// here, and none is needed to queue).
func TestQueueDropsTheOldest(t *testing.T) {
	c := &counts{reports: map[string]int{}}
	r := New(Options{Node: "n1", QueueSize: 2, Metrics: c, Log: logrus.NewEntry(logrus.New())})
	for _, name := range []string{"a", "b", "c"} {
		r.Report(plugin.PodReport{Pod: plugin.Pod{Name: name, Namespace: "default"}, Reason: plugin.ReasonHNS, Err: errors.New("x")})
	}
	if c.dropped != 1 {
		t.Fatalf("dropped %d, want 1", c.dropped)
	}
	left := r.waiting()
	if len(left) != 2 || left[0] != "b" || left[1] != "c" {
		t.Fatalf("queue holds %v, want the newest two [b c]", left)
	}
}

// TestRepeatsAreNotQueued: an outcome already reported for the pod (every
// resync reports each mapped pod again) takes no place in the queue.
func TestRepeatsAreNotQueued(t *testing.T) {
	c := &counts{reports: map[string]int{}}
	r := New(Options{Node: "n1", QueueSize: 1, Metrics: c, Log: logrus.NewEntry(logrus.New())})
	mapped := plugin.PodReport{Pod: plugin.Pod{Name: "web", Namespace: "default"}, Mapped: true, Endpoint: "EP1"}
	r.last[reportKey(mapped)] = state(mapped) // as after a successful send
	r.Report(mapped)
	if got := r.waiting(); len(got) != 0 {
		t.Fatalf("a repeated outcome was queued: %v", got)
	}
	failed := plugin.PodReport{Pod: mapped.Pod, Reason: plugin.ReasonHNS, Err: errors.New("x")}
	r.Report(failed)
	if got := r.waiting(); len(got) != 1 || r.pending["default/web"].rep.Mapped {
		t.Fatalf("a new outcome was not queued: %v", got)
	}
	if c.dropped != 0 {
		t.Errorf("dropped %d", c.dropped)
	}
}

// fakeAPI is an API server that holds one pod and can fail patches.
type fakeAPI struct {
	mu          sync.Mutex
	pod         corev1.Pod
	events      []*eventsv1.Event
	patches     int
	failPatches int
	lastPatch   []byte
}

func (f *fakeAPI) CreateEvent(_ context.Context, ev *eventsv1.Event) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.events = append(f.events, ev)
	return nil
}

func (f *fakeAPI) PatchPodStatus(_ context.Context, ns, name string, patch []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.patches++
	f.lastPatch = patch
	if ns != f.pod.Namespace || name != f.pod.Name {
		return fmt.Errorf("%w (%w): HTTP 404: pods %q not found", ErrAPI, ErrGone, name)
	}
	var p struct {
		Metadata struct{ UID string } `json:"metadata"`
	}
	if err := json.Unmarshal(patch, &p); err != nil || p.Metadata.UID != string(f.pod.UID) { // the API server's precondition
		return fmt.Errorf("%w (%w): HTTP 409: Precondition failed: UID in precondition: %s, UID in object meta: %s", ErrAPI, ErrRefused, p.Metadata.UID, f.pod.UID)
	}
	if f.patches <= f.failPatches {
		return fmt.Errorf("%w: HTTP 500: etcd timeout", ErrAPI)
	}
	return nil
}

// TestConditionRetryDoesNotRepeatTheEvent: a report whose condition patch
// failed is retried without a second event for the same outcome.
func TestConditionRetryDoesNotRepeatTheEvent(t *testing.T) {
	api := &fakeAPI{pod: corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", UID: "u1"},
		Spec: corev1.PodSpec{NodeName: "n1"}}, failPatches: 2}
	c := &counts{reports: map[string]int{}}
	r := New(Options{API: api, Node: "n1", QueueSize: 256, Metrics: c, Log: logrus.NewEntry(logrus.New())})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	r.Report(plugin.PodReport{Pod: plugin.Pod{Name: "web", Namespace: "default", UID: "u1"}, Mapped: true, Endpoint: "EP1"})
	deadline := time.Now().Add(10 * time.Second)
	for c.get("condition/sent") == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the condition was never set: %v", c.snapshot())
		}
		time.Sleep(5 * time.Millisecond)
	}
	api.mu.Lock()
	defer api.mu.Unlock()
	if len(api.events) != 1 || api.patches != 3 {
		t.Fatalf("%d events and %d patches, want 1 event and 3 patches (2 failed)", len(api.events), api.patches)
	}
	ev := api.events[0]
	if ev.Regarding.Name != "web" || ev.Regarding.UID != "u1" || ev.Reason != ReasonMapped || ev.Type != corev1.EventTypeNormal ||
		ev.ReportingInstance != "nri-hcn-portmap-n1" || ev.EventTime.IsZero() {
		t.Fatalf("event: %+v", ev)
	}
}

// TestRESTAPIErrors: an error status from the API server is ErrAPI with
// the server's own message and the object named.
func TestRESTAPIErrors(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusForbidden)
		_ = json.NewEncoder(w).Encode(metav1.Status{Status: "Failure", Code: 403,
			Message: `pods "web" is forbidden: User "system:serviceaccount:kube-system:x" cannot get resource "pods"`})
	}))
	t.Cleanup(srv.Close)
	api, err := NewRESTAPI(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	err = api.PatchPodStatus(context.Background(), "default", "web", []byte(`{}`))
	if !errors.Is(err, ErrAPI) || !strings.Contains(err.Error(), "default/web") || !strings.Contains(err.Error(), "cannot get resource") ||
		!strings.Contains(err.Error(), "403") {
		t.Fatalf("PatchPodStatus: %v", err)
	}
}

// runReporter runs r until the test ends.
func runReporter(t *testing.T, r *Reporter) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}

// A failure reaches the pod's owners as a Warning event whose reason says
// mapping failed and whose note starts with why, and as the condition set
// to False with that reason and the error as its message.
func TestFailureIsAWarningAndAFalseCondition(t *testing.T) {
	api := &fakeAPI{pod: corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", UID: "u1"},
		Spec: corev1.PodSpec{NodeName: "n1"}}}
	c := &counts{reports: map[string]int{}}
	r := New(Options{API: api, Node: "n1", QueueSize: 256, Metrics: c, Log: logrus.NewEntry(logrus.New())})
	runReporter(t, r)
	cause := errors.New("pod default/web: host port *:8080->80/tcp is already held by pod default/old (sandbox abc)")
	r.Report(plugin.PodReport{Pod: plugin.Pod{Name: "web", Namespace: "default", UID: "u1"}, Reason: plugin.ReasonConflict, Err: cause})
	deadline := time.Now().Add(10 * time.Second)
	for c.get("condition/sent") == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the condition was never set: %v", c.snapshot())
		}
		time.Sleep(5 * time.Millisecond)
	}
	api.mu.Lock()
	defer api.mu.Unlock()
	if len(api.events) != 1 {
		t.Fatalf("%d events, want 1", len(api.events))
	}
	ev := api.events[0]
	if ev.Type != corev1.EventTypeWarning || ev.Reason != ReasonFailed || ev.Note != plugin.ReasonConflict+": "+cause.Error() {
		t.Fatalf("event type %q, reason %q, note %q", ev.Type, ev.Reason, ev.Note)
	}
	var patch struct {
		Status struct {
			Conditions []corev1.PodCondition `json:"conditions"`
		} `json:"status"`
	}
	if err := json.Unmarshal(api.lastPatch, &patch); err != nil {
		t.Fatal(err)
	}
	if cs := patch.Status.Conditions; len(cs) != 1 || cs[0].Type != ConditionType || cs[0].Status != corev1.ConditionFalse ||
		cs[0].Reason != plugin.ReasonConflict || cs[0].Message != cause.Error() {
		t.Fatalf("condition patch %s", api.lastPatch)
	}
}

// Issue 29: whether a report is tried again is the package's table of
// errors, by what the API server answered: a pod that is gone (404) and a
// refusal (403: RBAC, admission) are not retried; an API server that is
// busy or down (503) is, a bounded number of times.
func TestAPIErrorsAreJudgedByTheTable(t *testing.T) {
	for _, tc := range []struct {
		status int
		kind   error
		tries  int
	}{
		{http.StatusNotFound, ErrGone, 1},
		{http.StatusForbidden, ErrDenied, config.APIReportAttempts},
		{http.StatusUnprocessableEntity, ErrRefused, 1},
		{http.StatusConflict, ErrRefused, 1}, // a failed precondition: another pod of that name
		{http.StatusServiceUnavailable, ErrUnavailable, config.APIReportAttempts},
	} {
		t.Run(fmt.Sprint(tc.status), func(t *testing.T) {
			var mu sync.Mutex
			gets := 0
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				gets++
				mu.Unlock()
				w.WriteHeader(tc.status)
				_ = json.NewEncoder(w).Encode(metav1.Status{Status: "Failure", Code: int32(tc.status), Message: "no"})
			}))
			t.Cleanup(srv.Close)
			api, err := NewRESTAPI(&rest.Config{Host: srv.URL})
			if err != nil {
				t.Fatal(err)
			}
			if err := api.PatchPodStatus(context.Background(), "default", "web", []byte(`{}`)); !errors.Is(err, tc.kind) || !errors.Is(err, ErrAPI) {
				t.Fatalf("HTTP %d: %v, want %v", tc.status, err, tc.kind)
			}
			mu.Lock()
			gets = 0
			mu.Unlock()
			r := New(Options{API: api, Node: "n1", QueueSize: 256, Metrics: &counts{reports: map[string]int{}}, Log: logrus.NewEntry(logrus.New()),
				RetryMin: time.Millisecond, RetryMax: time.Millisecond})
			runReporter(t, r)
			r.Report(plugin.PodReport{Pod: plugin.Pod{Name: "web", Namespace: "default", UID: "u1"}, Mapped: true, Endpoint: "EP1"})
			// retries 1 ms apart: over this window a sixth try would show
			deadline := time.Now().Add(500 * time.Millisecond)
			for time.Now().Before(deadline) {
				mu.Lock()
				n := gets
				mu.Unlock()
				if n > tc.tries {
					t.Fatalf("HTTP %d: %d tries, want %d", tc.status, n, tc.tries)
				}
				time.Sleep(20 * time.Millisecond)
			}
			mu.Lock()
			defer mu.Unlock()
			if gets != tc.tries {
				t.Fatalf("HTTP %d: %d tries, want %d", tc.status, gets, tc.tries)
			}
		})
	}
}

// waiting is the pods whose reports wait, oldest first.
func (r *Reporter) waiting() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	keys := slices.Collect(maps.Keys(r.pending))
	slices.SortFunc(keys, func(a, b string) int { return int(r.pending[a].seq) - int(r.pending[b].seq) })
	names := make([]string, len(keys))
	for i, k := range keys {
		names[i] = r.pending[k].rep.Pod.Name
	}
	return names
}

// The reporter reads nothing from the API server (the plugin's token has no
// get on pods): the event names the pod by the CRI record's UID, and the
// condition's patch carries that UID as a precondition, so another pod of
// the same name (recreated) is never patched, and the refusal is final.
func TestAReportWritesOnlyToThePodItCameFrom(t *testing.T) {
	api := &fakeAPI{pod: corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", UID: "u2"}}}
	c := &counts{reports: map[string]int{}}
	r := New(Options{API: api, Node: "n1", QueueSize: 256, Metrics: c, Log: logrus.NewEntry(logrus.New()), RetryMin: time.Millisecond, RetryMax: time.Millisecond})
	runReporter(t, r)
	r.Report(plugin.PodReport{Pod: plugin.Pod{Name: "web", Namespace: "default", UID: "u1"}, Mapped: true, Endpoint: "EP1"})
	eventually(t, "the patch tried", func() bool { return c.get("condition/failed") == 1 })
	time.Sleep(50 * time.Millisecond) // retries 1 ms apart: over this window a second try would show
	api.mu.Lock()
	defer api.mu.Unlock()
	if api.patches != 1 || len(api.events) != 1 || api.events[0].Regarding.UID != "u1" || api.events[0].Namespace != "default" {
		t.Fatalf("%d patches, events %+v; want one refused patch (final) and the event on u1 in its namespace", api.patches, api.events)
	}
	var p struct {
		Metadata struct{ UID string } `json:"metadata"`
	}
	if err := json.Unmarshal(api.lastPatch, &p); err != nil || p.Metadata.UID != "u1" {
		t.Fatalf("patch %s: want metadata.uid u1 as the precondition", api.lastPatch)
	}
}

// Issue 55: what a real kubelet showed. A refused patch (another pod of
// that name, a mirror pod's other UID: 409, 422) is told once: the
// resyncs that report the same outcome every minute send no second event
// and no second patch. A static pod (kubelet's annotation
// kubernetes.io/config.source is not "api") gets its event once and no
// condition: its sandbox's UID is kubelet's config hash, not the mirror
// pod's, so the UID precondition cannot name the mirror pod.
func TestAnOutcomeTheAPIServerRefusesIsToldOnce(t *testing.T) {
	for _, tc := range []struct {
		name    string
		pod     plugin.Pod
		patches int
		skipped int
	}{
		{"another pod of that name", plugin.Pod{Name: "web", Namespace: "default", UID: "u1"}, 1, 0},
		{"a static pod", plugin.Pod{Name: "web", Namespace: "default", UID: "6f1c0c6a4a1b2f3e",
			Annotations: map[string]string{ConfigSourceAnnotation: "file", "kubernetes.io/config.hash": "6f1c0c6a4a1b2f3e"}}, 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			api := &fakeAPI{pod: corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", UID: "mirror-uid"}}}
			c := &counts{reports: map[string]int{}}
			r := New(Options{API: api, Node: "n1", QueueSize: 256, Metrics: c, Log: logrus.NewEntry(logrus.New()), RetryMin: time.Millisecond, RetryMax: time.Millisecond})
			runReporter(t, r)
			rep := plugin.PodReport{Pod: tc.pod, Mapped: true, Endpoint: "EP1"}
			r.Report(rep)
			eventually(t, "the outcome handled", func() bool { return c.get("condition/failed")+c.get("condition/skipped") == 1 })
			for range 5 { // five resyncs, 10 ms apart
				time.Sleep(10 * time.Millisecond)
				r.Report(rep)
			}
			time.Sleep(50 * time.Millisecond) // retries 1 ms apart: over this window a repeat would show
			api.mu.Lock()
			defer api.mu.Unlock()
			if len(api.events) != 1 || api.patches != tc.patches || c.get("condition/skipped") != tc.skipped || len(r.waiting()) != 0 {
				t.Fatalf("%d events, %d patches, %d skipped, waiting %v; want 1 event, %d patches, %d skipped, nothing waiting",
					len(api.events), api.patches, c.get("condition/skipped"), r.waiting(), tc.patches, tc.skipped)
			}
		})
	}
}

func TestStaticSaysWhatKubeletRunsFromAFile(t *testing.T) {
	for src, want := range map[string]bool{"api": false, "file": true, "http": true, "": true} {
		if got := Static(plugin.Pod{Annotations: map[string]string{ConfigSourceAnnotation: src}}); got != want {
			t.Errorf("config.source %q: static %v, want %v", src, got, want)
		}
	}
	if Static(plugin.Pod{}) {
		t.Error("a pod without kubelet's annotation (not from kubelet's CRI): static, want not")
	}
}
