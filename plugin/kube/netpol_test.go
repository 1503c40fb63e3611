package kube

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/admission"
)

// fakePolicies is an API server's NetworkPolicies and the kinds it
// serves: the test changes them, and what it pushes reaches the watch.
type fakePolicies struct {
	mu      sync.Mutex
	items   []*networkingv1.NetworkPolicy
	served  []string
	kindErr error
	watches chan chan any // each watch asks for its stream: PolicyEvent or error
}

func (f *fakePolicies) ListNetworkPolicies(context.Context) ([]*networkingv1.NetworkPolicy, string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.items), "1", nil
}

func (f *fakePolicies) WatchNetworkPolicies(ctx context.Context, rv string, timeout time.Duration, each func(PolicyEvent)) error {
	stream := make(chan any)
	select {
	case f.watches <- stream:
	case <-ctx.Done():
		return ctx.Err()
	}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case x := <-stream:
			switch v := x.(type) {
			case PolicyEvent:
				each(v)
			case error:
				if errors.Is(v, io.EOF) {
					return nil
				}
				return v
			}
		}
	}
}

func (f *fakePolicies) ServedKinds(context.Context, []string) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.served), f.kindErr
}

func np(ns, name, rv string) *networkingv1.NetworkPolicy {
	return &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, ResourceVersion: rv},
		Spec: networkingv1.NetworkPolicySpec{PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}}}
}

// a clocked cache over a fake API server, whose publications and changes
// the test reads
type policyRig struct {
	api     *fakePolicies
	n       *NetworkPolicies
	advance func(time.Duration)
	mu      sync.Mutex
	told    []string
	last    admission.NetworkPolicies
}

func newPolicyRig(t *testing.T, kinds bool) *policyRig {
	t.Helper()
	r := &policyRig{api: &fakePolicies{watches: make(chan chan any)}}
	log := logrus.New()
	log.SetOutput(io.Discard)
	r.n = NewNetworkPolicies(r.api, kinds, time.Minute, nil, logrus.NewEntry(log))
	var mu sync.Mutex
	now := time.Now()
	r.n.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	r.advance = func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	r.n.every, r.n.maxAge = 20*time.Millisecond, time.Minute
	r.n.OnChange(func(ns string) { r.mu.Lock(); r.told = append(r.told, ns); r.mu.Unlock() })
	r.n.OnPublish(func(v admission.NetworkPolicies) { r.mu.Lock(); r.last = v; r.mu.Unlock() })
	return r
}

func (r *policyRig) heard() ([]string, admission.NetworkPolicies) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.told), r.last
}

// Issue 52: the cache follows the API server's NetworkPolicies, lists then
// watches, publishes them compiled as a value after every change and tells
// which namespace changed; the kinds it does not evaluate are discovered
// and published too.
func TestNetworkPoliciesAreFollowedAndPublished(t *testing.T) {
	r := newPolicyRig(t, true)
	r.api.items = []*networkingv1.NetworkPolicy{np("team", "deny", "1")}
	r.api.served = []string{"crd.antrea.io/clusternetworkpolicies"}
	stream := r.run(t)
	eventually(t, "the list and the kinds published", func() bool {
		_, v := r.heard()
		return len(v.ByNamespace["team"]) == 1 && slices.Equal(v.Unevaluated, r.api.served) && r.n.Stale() == ""
	})
	stream <- PolicyEvent{Type: "ADDED", Policy: np("shop", "allow", "2"), ResourceVersion: "2"}
	eventually(t, "the event published and its namespace told", func() bool {
		told, v := r.heard()
		return len(v.ByNamespace["shop"]) == 1 && slices.Contains(told, "shop")
	})
	stream <- PolicyEvent{Type: "DELETED", Policy: np("team", "deny", "3"), ResourceVersion: "3"}
	eventually(t, "the deletion published", func() bool { _, v := r.heard(); return len(v.ByNamespace["team"]) == 0 })
	r.api.mu.Lock()
	r.api.served = nil
	r.api.mu.Unlock()
	eventually(t, "a kind no longer served told to every namespace", func() bool {
		told, v := r.heard()
		return len(v.Unevaluated) == 0 && slices.Contains(told, "")
	})
}

// ... and when nothing has been heard for longer than the bound, every
// namespace is told once (the mappings in place are judged again), and the
// view says why it grants nothing.
func TestNetworkPoliciesThatAgeOutAreToldToEveryNamespace(t *testing.T) {
	r := newPolicyRig(t, false)
	r.n.maxAge = 300 * time.Millisecond
	r.run(t)
	eventually(t, "listed", func() bool { return r.n.Stale() == "" })
	before, _ := r.heard()
	r.advance(time.Second)
	eventually(t, "every namespace told", func() bool {
		told, _ := r.heard()
		return len(told) > len(before) && told[len(told)-1] == "" && r.n.Stale() != ""
	})
}

// run runs the cache until the test ends and returns its first watch's
// stream, once it lists and watches.
func (r *policyRig) run(t *testing.T) chan any {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.n.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return nextWatch(t, r.api.watches)
}

func nextWatch(t *testing.T, watches chan chan any) chan any {
	t.Helper()
	select {
	case s := <-watches:
		return s
	case <-time.After(10 * time.Second): // a guard against a hang
		t.Fatal("the cache never watched")
		return nil
	}
}

// Discovery finds the policy kinds a real API server's answers list: a
// kind whose group is served but not its resource is not one.
func TestTheKindsServedAreFoundByDiscovery(t *testing.T) {
	answers := map[string]any{
		"/apis": metav1.APIGroupList{Groups: []metav1.APIGroup{
			{Name: "apps", Versions: []metav1.GroupVersionForDiscovery{{GroupVersion: "apps/v1"}}},
			{Name: "crd.antrea.io", Versions: []metav1.GroupVersionForDiscovery{{GroupVersion: "crd.antrea.io/v1beta1"}, {GroupVersion: "crd.antrea.io/v1alpha1"}}},
			{Name: "crd.projectcalico.org", Versions: []metav1.GroupVersionForDiscovery{{GroupVersion: "crd.projectcalico.org/v1"}}},
		}},
		"/apis/crd.antrea.io/v1beta1":       metav1.APIResourceList{APIResources: []metav1.APIResource{{Name: "clusternetworkpolicies"}, {Name: "tiers"}}},
		"/apis/crd.antrea.io/v1alpha1":      metav1.APIResourceList{APIResources: []metav1.APIResource{{Name: "externalentities"}}},
		"/apis/crd.projectcalico.org/v1":    metav1.APIResourceList{APIResources: []metav1.APIResource{{Name: "ippools"}}},
		"/apis/networking.k8s.io/v1":        metav1.APIResourceList{APIResources: []metav1.APIResource{{Name: "networkpolicies"}}},
		"/apis/policy.networking.k8s.io/v1": nil,
	}
	asked := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		asked[req.URL.Path]++
		a, ok := answers[req.URL.Path]
		if !ok {
			http.NotFound(w, req)
			return
		}
		_ = json.NewEncoder(w).Encode(a)
	}))
	defer srv.Close()
	api, err := NewRESTAPI(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	served, err := api.ServedKinds(context.Background(), PolicyKinds())
	if err != nil || !slices.Equal(served, []string{"crd.antrea.io/clusternetworkpolicies"}) {
		t.Fatalf("served %v, %v", served, err)
	}
	if asked["/apis/apps/v1"] > 0 {
		t.Errorf("asked a group no policy kind is in: %v", asked)
	}
}

// What the view of 1,000 NetworkPolicies (a selector and two rules each,
// spread over 100 namespaces) costs the plugin to hold, in heap: the
// memory row of issue 52 (go test -bench NetworkPolicies ./plugin/kube).
func BenchmarkAViewOf1000NetworkPolicies(b *testing.B) {
	items := make([]*networkingv1.NetworkPolicy, 0, 1000)
	for i := range 1000 {
		var pol networkingv1.NetworkPolicy
		doc := fmt.Sprintf(`{"metadata":{"name":"p%d","namespace":"ns%d","resourceVersion":"%d"},"spec":{"podSelector":{"matchLabels":{"app":"a%d"}},`+
			`"ingress":[{"from":[{"podSelector":{"matchLabels":{"role":"client"}}}],"ports":[{"port":80}]},{"from":[{"ipBlock":{"cidr":"10.0.0.0/8"}}]}]}}`,
			i, i%100, i, i)
		if err := json.Unmarshal([]byte(doc), &pol); err != nil {
			b.Fatal(err)
		}
		items = append(items, &pol)
	}
	log := logrus.New()
	log.SetOutput(io.Discard)
	var held *NetworkPolicies
	var before, after runtime.MemStats
	b.ReportAllocs()
	for b.Loop() {
		runtime.GC()
		runtime.ReadMemStats(&before)
		held = NewNetworkPolicies(&fakePolicies{}, true, time.Minute, nil, logrus.NewEntry(log))
		held.replace(items)
		runtime.GC()
		runtime.ReadMemStats(&after)
	}
	b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/1024, "held-KiB")
	runtime.KeepAlive(held)
}

// A discovery that fails is asked again soon (the retry rule), not at the
// next round: the kinds are known as soon as the API server answers.
func TestAFailedDiscoveryIsAskedAgainSoon(t *testing.T) {
	r := newPolicyRig(t, true)
	r.n.every, r.n.retryMin, r.n.retryMax = time.Hour, 10*time.Millisecond, 20*time.Millisecond
	r.api.kindErr = errors.New("connection refused")
	r.run(t)
	time.Sleep(50 * time.Millisecond)
	if r.n.Stale() == "" {
		t.Fatal("fresh while the kinds were never heard")
	}
	r.api.mu.Lock()
	r.api.kindErr = nil
	r.api.mu.Unlock()
	eventually(t, "the kinds heard once the API server answers", func() bool { return r.n.Stale() == "" })
}

// A list that works again asks the kinds at once, not at the discovery's
// next retry: a plugin started while the API server was down maps as soon
// as it answers.
func TestAListThatWorksAgainAsksTheKindsAtOnce(t *testing.T) {
	r := newPolicyRig(t, true)
	r.n.every, r.n.retryMin, r.n.retryMax = time.Hour, time.Hour, time.Hour
	r.api.kindErr = errors.New("connection refused")
	stream := r.run(t)
	time.Sleep(50 * time.Millisecond) // the first discovery has failed, the next is an hour away
	r.api.mu.Lock()
	r.api.kindErr = nil
	r.api.mu.Unlock()
	stream <- fmt.Errorf("%w: test", ErrExpired) // the watch ends: listed again
	nextWatch(t, r.api.watches)
	eventually(t, "the kinds asked once the list works", func() bool { return r.n.Stale() == "" })
}

// A list that works again restarts the discovery's retry curve: a
// discovery the API server still refuses as it warms up (RBAC not loaded:
// HTTP 403) is asked again at the bottom of the curve, not at the step the
// outage grew it to (the e2e test that restarts the API server met the
// kinds unknown for longer than its window).
func TestAListThatWorksAgainRestartsTheDiscoverysCurve(t *testing.T) {
	r := newPolicyRig(t, true)
	r.n.every, r.n.retryMin, r.n.retryMax = time.Hour, 10*time.Millisecond, time.Hour
	r.api.kindErr = errors.New("connection refused")
	stream := r.run(t)
	time.Sleep(2 * time.Second)                  // the outage: the curve has grown past a second
	stream <- fmt.Errorf("%w: test", ErrExpired) // listed again; the kicked discovery still refused
	nextWatch(t, r.api.watches)
	time.Sleep(50 * time.Millisecond)
	r.api.mu.Lock()
	r.api.kindErr = nil
	r.api.mu.Unlock()
	deadline := time.Now().Add(time.Second)
	for r.n.Stale() != "" {
		if time.Now().After(deadline) {
			t.Fatalf("the kinds still unknown a second after the API server answered: %s", r.n.Stale())
		}
		time.Sleep(10 * time.Millisecond)
	}
}
