package kube

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/config"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/admission"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/backoff"
)

// PolicyKinds are the policy kinds besides Kubernetes NetworkPolicy that
// isolate pods on clusters whose engines run on Windows nodes, as
// group/resource: the plugin does not evaluate them, so where the API
// server serves one, host ports are refused unless the configuration says
// otherwise (admission.network_policy). AdminNetworkPolicy and
// BaselineAdminNetworkPolicy (sig-network's network-policy-api, v1alpha1),
// its ClusterNetworkPolicy (v1alpha2); Calico's NetworkPolicy and
// GlobalNetworkPolicy, through its API server (projectcalico.org/v3) or as
// the CRDs that back them (crd.projectcalico.org/v1); Antrea's
// ClusterNetworkPolicy and NetworkPolicy (crd.antrea.io).
func PolicyKinds() []string {
	return []string{
		"policy.networking.k8s.io/adminnetworkpolicies", "policy.networking.k8s.io/baselineadminnetworkpolicies",
		"policy.networking.k8s.io/clusternetworkpolicies",
		"projectcalico.org/networkpolicies", "projectcalico.org/globalnetworkpolicies",
		"crd.projectcalico.org/networkpolicies", "crd.projectcalico.org/globalnetworkpolicies",
		"crd.antrea.io/clusternetworkpolicies", "crd.antrea.io/networkpolicies",
	}
}

// PolicyEvent is one change a watch of NetworkPolicies reports.
type PolicyEvent struct {
	Type            string // ADDED, MODIFIED, DELETED, BOOKMARK
	Policy          *networkingv1.NetworkPolicy
	ResourceVersion string // the object's (a bookmark's: where the watch is)
}

// NetworkPolicyAPI is what the NetworkPolicy cache asks of the API server
// (the process boundary, and the seam of the unit tests).
type NetworkPolicyAPI interface {
	ListNetworkPolicies(ctx context.Context) ([]*networkingv1.NetworkPolicy, string, error)
	WatchNetworkPolicies(ctx context.Context, resourceVersion string, timeout time.Duration, each func(PolicyEvent)) error
	// ServedKinds says which of kinds (group/resource) the API server
	// serves, by discovery.
	ServedKinds(ctx context.Context, kinds []string) ([]string, error)
}

// NetworkPolicies is the plugin's view of the cluster's NetworkPolicies
// (compiled, admission.NetworkPolicy) and of the policy kinds the API
// server serves that it does not evaluate, kept by a list and a watch
// (reflector) and by discovery, published to the core as a value after
// every change: a start reads no API. As the namespaces' labels, the view
// is as old as the API server's last word, and older than maxAge it grants
// nothing; the moment it becomes too old, every namespace is told changed,
// so that the mappings in place are judged again (and removed).
type NetworkPolicies struct {
	api     NetworkPolicyAPI
	log     *logrus.Entry
	metrics NetworkPolicyMetrics
	kinds   bool // the kinds served matter (admission.network_policy = "kubernetes")
	maxAge  time.Duration
	grace   time.Duration
	now     func() time.Time
	// retryMin and retryMax bound the wait before a failed list, watch or
	// discovery is tried again; every is how often the kinds are asked
	retryMin, retryMax, every time.Duration

	mu sync.Mutex
	// byNS is namespace -> name -> the policy and its resource version;
	// pub is what was published, never changed once handed out
	byNS        map[string]map[string]held
	pub         map[string][]admission.NetworkPolicy
	heard       time.Time
	kindsHeard  time.Time
	unevaluated []string
	stale       bool // as last told
	// kick asks for a discovery now (a list worked: the API server
	// answers again)
	kick    chan struct{}
	changed func(namespace string)
	publish func(admission.NetworkPolicies)
}

type held struct {
	rv  string
	pol admission.NetworkPolicy
}

// NetworkPolicyMetrics is told whether the view follows the API server.
type NetworkPolicyMetrics interface {
	NetworkPoliciesSynced(synced bool)
}

// NewNetworkPolicies returns the cache; Run fills and keeps it. kinds: the
// policy kinds the API server serves are asked (discovery).
func NewNetworkPolicies(api NetworkPolicyAPI, kinds bool, maxAge time.Duration, metrics NetworkPolicyMetrics, log *logrus.Entry) *NetworkPolicies {
	_, grace := watchWindow(maxAge)
	return &NetworkPolicies{api: api, log: log, metrics: metrics, kinds: kinds, maxAge: maxAge, grace: grace,
		now: time.Now, retryMin: config.APIRetryMin, retryMax: config.APIRetryMax, every: min(config.PolicyKindsEvery, maxAge/2),
		byNS: map[string]map[string]held{}, pub: map[string][]admission.NetworkPolicy{}, kick: make(chan struct{}, 1)}
}

// OnChange makes fn hear each namespace whose policies changed, and ""
// when every namespace's may have (the view became too old, or fresh
// again, or the kinds served changed). Call it before Run.
func (n *NetworkPolicies) OnChange(fn func(namespace string)) { n.changed = fn }

// OnPublish makes fn be given the view as a value, at once and after every
// change. Call it before Run.
func (n *NetworkPolicies) OnPublish(fn func(admission.NetworkPolicies)) {
	n.publish = fn
	fn(n.view())
}

func (n *NetworkPolicies) view() admission.NetworkPolicies {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.viewLocked()
}

func (n *NetworkPolicies) viewLocked() admission.NetworkPolicies {
	return admission.NetworkPolicies{ByNamespace: n.pub, Unevaluated: n.unevaluated, Heard: n.heard, KindsHeard: n.kindsHeard,
		MaxAge: n.maxAge, At: n.now()}
}

// Stale says why the view is too old to grant anything ("": it is not).
func (n *NetworkPolicies) Stale() string { return n.view().Stale(n.kinds) }

// Health is Stale as a health check.
func (n *NetworkPolicies) Health(context.Context) error {
	if why := n.Stale(); why != "" {
		return errors.New(why)
	}
	return nil
}

// Run lists the NetworkPolicies, then watches them, asks the kinds served
// every so often, and tells when the view ages out, until ctx ends.
func (n *NetworkPolicies) Run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Go(func() { n.age(ctx) })
	if n.kinds {
		wg.Go(func() { n.discover(ctx) })
	}
	reflector{what: "network policies", listed: "the pods they isolate are known",
		listFailed: "host ports are not mapped until they are read", watchFailed: "the policies last read stay in force for kubernetes.labels_max_age",
		list: func(ctx context.Context) (string, int, error) {
			items, rv, err := n.api.ListNetworkPolicies(ctx)
			if err == nil {
				n.replace(items)
				select { // the API server answers: the kinds are asked now, not at the next retry
				case n.kick <- struct{}{}:
				default:
				}
			}
			return rv, len(items), err
		},
		watch: func(ctx context.Context, rv string, timeout time.Duration, seen func(string)) error {
			return n.api.WatchNetworkPolicies(ctx, rv, timeout, func(ev PolicyEvent) {
				seen(ev.ResourceVersion)
				n.apply(ev)
			})
		},
		notCurrent: func() { n.synced(false) }, synced: n.synced, timeout: func() time.Duration { timeout, _ := watchWindow(n.maxAge); return timeout },
		grace: n.grace, retryMin: n.retryMin, retryMax: n.retryMax, log: n.log}.run(ctx)
	wg.Wait()
}

func (n *NetworkPolicies) synced(on bool) {
	if n.metrics != nil {
		n.metrics.NetworkPoliciesSynced(on)
	}
}

// compile is the policy as admission weighs it; one that does not compile
// (the API server validates them, so never seen) selects every pod of its
// namespace and admits nothing: what cannot be read grants nothing.
func (n *NetworkPolicies) compile(np *networkingv1.NetworkPolicy) admission.NetworkPolicy {
	c, err := admission.CompileNetworkPolicy(np)
	if err != nil {
		n.log.WithError(err).Warn("a NetworkPolicy the plugin cannot read isolates every pod of its namespace for host ports")
		return admission.NetworkPolicy{Namespace: np.Namespace, Name: np.Name, Selector: labels.Everything(), Ingress: true}
	}
	return c
}

// replace makes a list the whole view; every namespace whose policies
// differ is told (all of them when the view was too old).
func (n *NetworkPolicies) replace(items []*networkingv1.NetworkPolicy) {
	next := map[string]map[string]held{}
	for _, np := range items {
		if next[np.Namespace] == nil {
			next[np.Namespace] = map[string]held{}
		}
		next[np.Namespace][np.Name] = held{rv: np.ResourceVersion, pol: n.compile(np)}
	}
	n.mu.Lock()
	var changed []string
	if n.staleLocked() {
		changed = []string{""}
	}
	for ns := range joinKeys(n.byNS, next) {
		if !maps.EqualFunc(n.byNS[ns], next[ns], func(a, b held) bool { return a.rv == b.rv }) {
			changed = append(changed, ns)
		}
	}
	n.byNS, n.heard, n.stale = next, n.now(), false
	n.pub = map[string][]admission.NetworkPolicy{}
	for ns := range next {
		n.pub[ns] = policiesOf(next[ns])
	}
	n.mu.Unlock()
	n.tell(changed...)
}

// apply takes a watch event: any event, a bookmark included, is the API
// server's word that the view is current as of now.
func (n *NetworkPolicies) apply(ev PolicyEvent) {
	n.mu.Lock()
	var changed []string
	if n.staleLocked() {
		changed = []string{""}
	}
	n.heard, n.stale = n.now(), false
	if np := ev.Policy; np != nil && ev.Type != "BOOKMARK" {
		pols := maps.Clone(n.byNS[np.Namespace])
		if pols == nil {
			pols = map[string]held{}
		}
		if ev.Type == "DELETED" {
			delete(pols, np.Name)
		} else {
			pols[np.Name] = held{rv: np.ResourceVersion, pol: n.compile(np)}
		}
		n.byNS[np.Namespace] = pols
		pub := maps.Clone(n.pub) // views handed out keep theirs
		pub[np.Namespace] = policiesOf(pols)
		n.pub = pub
		changed = append(changed, np.Namespace)
	}
	n.mu.Unlock()
	n.tell(changed...)
}

// discover asks which policy kinds the API server serves, every n.every,
// until ctx ends: a change of them tells every namespace.
func (n *NetworkPolicies) discover(ctx context.Context) {
	failed := 0
	retry := backoff.New(n.retryMin, max(n.retryMax, n.retryMin))
	for {
		cctx, cancel := context.WithTimeout(ctx, config.APICallTimeout)
		served, err := n.api.ServedKinds(cctx, PolicyKinds())
		cancel()
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			failed++
			if failed == 1 || failed%10 == 0 {
				n.log.WithError(err).WithField("attempt", failed).Warn("asking the API server which policy kinds it serves failed: " +
					"host ports are not mapped once what was asked before is older than kubernetes.labels_max_age")
			}
			// a failure is asked again soon, not at the next round; a list
			// that worked meanwhile (the API server is back) starts the
			// curve again, so a discovery refused while the API server
			// warms up is not left at the cap
			ok, kicked := n.wait(ctx, retry.Step())
			if !ok {
				return
			}
			if kicked {
				retry.Reset()
			}
			continue
		default:
			failed = 0
			retry.Reset()
			n.mu.Lock()
			var changed []string
			if n.staleLocked() || !slices.Equal(served, n.unevaluated) {
				changed = []string{""}
			}
			n.unevaluated, n.kindsHeard, n.stale = served, n.now(), false
			n.mu.Unlock()
			if len(changed) > 0 && len(served) > 0 {
				n.log.WithField("kinds", served).Warn("the API server serves policy kinds the plugin does not evaluate: host ports are refused " +
					`(admission.network_policy = "kubernetes-only" says none of them selects a pod with host ports)`)
			}
			n.tell(changed...)
		}
		if ok, _ := n.wait(ctx, n.every); !ok {
			return
		}
	}
}

// wait waits d, or less when a discovery is asked for (kicked); false
// when ctx ended first.
func (n *NetworkPolicies) wait(ctx context.Context, d time.Duration) (ok, kicked bool) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false, false
	case <-t.C:
		return true, false
	case <-n.kick:
		return true, true
	}
}

// age tells every namespace when the view becomes too old to grant
// anything: the mappings in place are judged again, and removed.
func (n *NetworkPolicies) age(ctx context.Context) {
	tick := max(n.maxAge/10, 100*time.Millisecond)
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(tick):
		}
		n.mu.Lock()
		aged := !n.stale && n.staleLocked() && !n.heard.IsZero()
		n.stale = n.stale || aged
		n.mu.Unlock()
		if aged {
			n.log.WithField("why", n.Stale()).Warn("the NetworkPolicies last read are too old: host ports are unmapped until the API server is heard again")
			n.tell("")
		}
	}
}

// staleLocked says whether the view is too old to grant anything (n.mu
// held).
func (n *NetworkPolicies) staleLocked() bool { return n.viewLocked().Stale(n.kinds) != "" }

// tell publishes the view, then says which namespaces changed (outside
// the lock: the listener decides with what was published).
func (n *NetworkPolicies) tell(names ...string) {
	if n.publish != nil {
		n.publish(n.view())
	}
	if n.changed == nil {
		return
	}
	for _, name := range names {
		n.changed(name)
	}
}

func policiesOf(pols map[string]held) []admission.NetworkPolicy {
	out := make([]admission.NetworkPolicy, 0, len(pols))
	for _, name := range slices.Sorted(maps.Keys(pols)) {
		out = append(out, pols[name].pol)
	}
	return out
}

func joinKeys[V any](a, b map[string]V) map[string]bool {
	out := map[string]bool{}
	for k := range a {
		out[k] = true
	}
	for k := range b {
		out[k] = true
	}
	return out
}
