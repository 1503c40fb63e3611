package kube

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/config"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/admission"
)

// Namespace is what the plugin reads of a namespace: its name and labels.
type Namespace struct {
	Name   string
	Labels map[string]string
}

// WatchEvent is one change a watch of namespaces reports.
type WatchEvent struct {
	Type      string // ADDED, MODIFIED, DELETED, BOOKMARK
	Namespace Namespace
	// ResourceVersion is the object's (a bookmark's: where the watch is)
	ResourceVersion string
}

// ErrExpired: the resource version a watch starts from is too old for the
// API server (410 Gone): the namespaces are listed again.
var ErrExpired = errors.New("the watch's resource version is too old")

// NamespaceAPI is what the namespace cache asks of the API server (the
// process boundary, and the seam of the unit tests).
type NamespaceAPI interface {
	// ListNamespaces reads every namespace and the resource version the
	// list is as of.
	ListNamespaces(ctx context.Context) ([]Namespace, string, error)
	// WatchNamespaces reports every change after resourceVersion, and
	// the API server's bookmarks, to each until the watch ends (nil: the
	// API server closed it after timeout, as asked) or fails (ErrExpired:
	// list again).
	WatchNamespaces(ctx context.Context, resourceVersion string, timeout time.Duration, each func(WatchEvent)) error
}

// NamespaceMetrics is told whether the cache holds the API server's view
// (whether it is too old to grant anything is Stale, read at each scrape).
type NamespaceMetrics interface {
	NamespacesSynced(synced bool)
}

// Namespaces is the plugin's view of the namespaces' Pod Security enforce
// labels, kept by a list and a watch of the API
// server, as client-go's reflector keeps an informer's store: no request
// per pod start. What it holds is the API server's word as last heard:
// the labels are as old as the last list, watch event or bookmark (the
// watch asks for bookmarks, about one a minute, and for a timeout well
// inside maxAge, and is ended here a little after it: a silent
// connection is not news), and older than maxAge
// (kubernetes.labels_max_age) they grant nothing, whatever the
// connection's state (a namespace downgraded meanwhile must not keep
// granting): every namespace is then not known, until the API server is
// heard again. While the watch is broken (the API server restarting,
// unreachable, or refusing an expired token), the list is tried again. A
// namespace never read (before the first list, or newer than what the
// watch has shown) is not known: the core then holds the annotation back,
// never grants it.
type Namespaces struct {
	api     NamespaceAPI
	log     *logrus.Entry
	metrics NamespaceMetrics
	// retryMin and retryMax bound the wait before a failed list or watch
	// is tried again
	retryMin, retryMax time.Duration

	maxAge time.Duration
	// grace is how long past the timeout it asks a silent watch is ended
	grace time.Duration
	now   func() time.Time // the clock (tests set their own)

	mu sync.RWMutex
	// labels is never changed in place: a list or an event replaces it
	// (a published view holds it)
	labels map[string]admission.Label
	// heard: when the API server last said something of the namespaces
	// (a list, a watch event, a bookmark); zero before the first list
	heard time.Time
	// changed is told each namespace whose enforce label became known or
	// changed (nil: nobody); set before Run
	changed func(namespace string)
	// publish is given the labels after every list and event (nil:
	// nobody); set before Run
	publish func(admission.Labels)
}

// NewNamespaces returns the cache; Run fills and keeps it. metrics may be
// nil.
func NewNamespaces(api NamespaceAPI, maxAge time.Duration, metrics NamespaceMetrics, log *logrus.Entry) *Namespaces {
	_, grace := watchWindow(maxAge)
	return &Namespaces{api: api, log: log, metrics: metrics, retryMin: config.APIRetryMin, retryMax: config.APIRetryMax,
		maxAge: maxAge, grace: grace, now: time.Now, labels: map[string]admission.Label{}}
}

// OnChange makes fn hear each namespace whose enforce label becomes known
// (a list) or changes (a list or the watch): the core syncs the pods it
// held back for it at once. Call it before Run.
func (n *Namespaces) OnChange(fn func(namespace string)) { n.changed = fn }

// OnPublish makes fn be given the labels as a value, at once and after
// every list and event: the core decides each sync with the labels as the
// API server last said them, aged as of the sync (admission.Labels), and
// never reads this cache. Call it before Run.
func (n *Namespaces) OnPublish(fn func(admission.Labels)) {
	n.publish = fn
	fn(n.view())
}

// view is the labels held, as a value.
func (n *Namespaces) view() admission.Labels {
	n.mu.RLock()
	defer n.mu.RUnlock()
	return admission.Labels{Enforce: n.labels, Heard: n.heard, MaxAge: n.maxAge}
}

// Stale says why the labels held are too old to grant anything (nothing
// heard from the API server, no list, event or bookmark, for longer than
// kubernetes.labels_max_age), "" when they are not: /healthz's check, and
// the reason an annotation is held back.
func (n *Namespaces) Stale() string {
	v := n.view()
	v.At = n.now()
	return v.Stale()
}

// watchTimeout is how long one watch is asked to stay open (watchWindow).
func (n *Namespaces) watchTimeout() time.Duration {
	timeout, _ := watchWindow(n.maxAge)
	return timeout
}

// Health is Stale as a health check.
func (n *Namespaces) Health(context.Context) error {
	if why := n.Stale(); why != "" {
		return errors.New(why)
	}
	return nil
}

func labelOf(ns Namespace) admission.Label {
	v, ok := ns.Labels[admission.LabelEnforce]
	return admission.Label{Value: v, Labelled: ok}
}

// Run lists the namespaces, then watches them, until ctx ends (reflector).
func (n *Namespaces) Run(ctx context.Context) {
	reflector{what: "namespaces", listed: "their Pod Security levels are known",
		listFailed:  "annotations in namespaces not read yet are held back",
		watchFailed: "the labels last read stay in force for kubernetes.labels_max_age",
		list: func(ctx context.Context) (string, int, error) {
			items, rv, err := n.api.ListNamespaces(ctx)
			if err == nil {
				n.replace(items)
			}
			return rv, len(items), err
		},
		watch: func(ctx context.Context, rv string, timeout time.Duration, seen func(string)) error {
			return n.api.WatchNamespaces(ctx, rv, timeout, func(ev WatchEvent) {
				seen(ev.ResourceVersion)
				n.apply(ev)
			})
		},
		notCurrent: n.notCurrent, synced: n.synced, timeout: n.watchTimeout, grace: n.grace,
		retryMin: n.retryMin, retryMax: n.retryMax, log: n.log}.run(ctx)
}

func (n *Namespaces) synced(on bool) {
	if n.metrics != nil {
		n.metrics.NamespacesSynced(on)
	}
}

// notCurrent says that the view stopped following the API server (its
// labels age from the last word heard, as always).
func (n *Namespaces) notCurrent() { n.synced(false) }

// replace makes a list the whole view.
func (n *Namespaces) replace(items []Namespace) {
	next := make(map[string]admission.Label, len(items))
	for _, ns := range items {
		next[ns.Name] = labelOf(ns)
	}
	var changed []string
	n.mu.Lock()
	wasStale := n.staleLocked()
	for name, l := range next {
		if was, ok := n.labels[name]; !ok || was != l || wasStale { // known again after being too old
			changed = append(changed, name)
		}
	}
	n.labels, n.heard = next, n.now()
	n.mu.Unlock()
	n.tell(changed...)
}

// apply takes a watch event: any event, a bookmark included, is the API
// server's word that the view is current as of now.
func (n *Namespaces) apply(ev WatchEvent) {
	n.mu.Lock()
	var changed []string
	wasStale := n.staleLocked()
	n.heard = n.now()
	if wasStale { // known again: every namespace held
		for name := range n.labels {
			changed = append(changed, name)
		}
	}
	switch ev.Type {
	case "ADDED", "MODIFIED":
		l := labelOf(ev.Namespace)
		if was, ok := n.labels[ev.Namespace.Name]; !ok || was != l {
			if !slices.Contains(changed, ev.Namespace.Name) {
				changed = append(changed, ev.Namespace.Name)
			}
			next := maps.Clone(n.labels) // views handed out keep theirs
			next[ev.Namespace.Name] = l
			n.labels = next
		}
	case "DELETED":
		if _, ok := n.labels[ev.Namespace.Name]; ok {
			next := maps.Clone(n.labels)
			delete(next, ev.Namespace.Name)
			n.labels = next
		}
	}
	n.mu.Unlock()
	n.tell(changed...)
}

// tell publishes the labels, then says which namespaces' levels became
// known or changed (outside the lock: the listener decides with what was
// published).
func (n *Namespaces) tell(names ...string) {
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

// staleLocked says whether the labels were too old to grant anything
// (n.mu held).
func (n *Namespaces) staleLocked() bool {
	return admission.Labels{Heard: n.heard, MaxAge: n.maxAge, At: n.now()}.Stale() != ""
}

// errWatch is a watch's ERROR event as an error: 410 is ErrExpired, the
// rest the plugin's kind of the status code.
func errWatch(code int, msg string) error {
	if code == http.StatusGone {
		return fmt.Errorf("%w: %s", ErrExpired, msg)
	}
	return fmt.Errorf("%w (%w): watch: HTTP %d: %s", ErrAPI, kindOfStatus(code), code, msg)
}
