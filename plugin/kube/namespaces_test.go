package kube

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/admission"
)

// fakeNamespaces is an API server's namespaces: the test changes them, and
// what it pushes reaches the watch that runs.
type fakeNamespaces struct {
	mu      sync.Mutex
	ns      map[string]map[string]string // name -> labels
	listErr error
	lists   int
	watches chan chan any // each watch asks for its stream: WatchEvent or error
	timeout time.Duration // what the last watch asked
	window  time.Duration // how long the last watch was given before it is ended
}

func newFakeNamespaces() *fakeNamespaces {
	return &fakeNamespaces{ns: map[string]map[string]string{}, watches: make(chan chan any)}
}

func (f *fakeNamespaces) ListNamespaces(ctx context.Context) ([]Namespace, string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lists++
	if f.listErr != nil {
		return nil, "", f.listErr
	}
	var out []Namespace
	for name, l := range f.ns {
		out = append(out, Namespace{Name: name, Labels: l})
	}
	return out, fmt.Sprint(f.lists), nil
}

func (f *fakeNamespaces) WatchNamespaces(ctx context.Context, rv string, timeout time.Duration, each func(WatchEvent)) error {
	f.mu.Lock()
	f.timeout = timeout
	if deadline, ok := ctx.Deadline(); ok {
		f.window = time.Until(deadline)
	}
	f.mu.Unlock()
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
			case WatchEvent:
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

func (f *fakeNamespaces) set(listErr error, ns map[string]map[string]string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.listErr = listErr
	if ns != nil {
		f.ns = ns
	}
}

// next is the next watch's stream, once the cache watches.
func (f *fakeNamespaces) next(t *testing.T) chan any {
	t.Helper()
	select {
	case s := <-f.watches:
		return s
	case <-time.After(10 * time.Second): // a guard against a hang
		t.Fatal("the cache never watched")
		return nil
	}
}

type syncedMetric struct {
	mu sync.Mutex
	on []bool
}

func (m *syncedMetric) NamespacesSynced(on bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.on = append(m.on, on)
}

func (m *syncedMetric) last() (bool, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.on) == 0 {
		return false, false
	}
	return m.on[len(m.on)-1], true
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	end := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(end) {
			t.Fatalf("gave up waiting: %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

type want struct {
	value           string
	labelled, known bool
}

func label(n *Namespaces, ns string) want {
	v, l, unknown := enforceLabel(n, ns)
	return want{v, l, unknown == ""}
}

const enforce = "pod-security.kubernetes.io/enforce"

// Issue 31: the namespaces' labels come from a list, then a watch. Never
// read is not known; a watch's changes apply; a broken watch keeps the
// labels last read (and the metric says the view is not current) and lists
// again; an expired one lists again, so a namespace gone meanwhile is no
// longer known; an API server down from the start leaves everything
// unknown until it answers.
func TestNamespacesFollowTheAPIServer(t *testing.T) {
	api := newFakeNamespaces()
	api.set(errors.New("connection refused"), map[string]map[string]string{
		"team": {enforce: "baseline"}, "open": {enforce: "privileged"}, "plain": {"app": "x"}})
	m := &syncedMetric{}
	n := NewNamespaces(api, time.Hour, m, logrus.NewEntry(logrus.New()))
	n.retryMin, n.retryMax = time.Millisecond, 2*time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() { n.Run(ctx); close(done) }()

	// the API server down from the start: nothing known, not synced
	eventually(t, "lists tried", func() bool { api.mu.Lock(); defer api.mu.Unlock(); return api.lists >= 3 })
	if got := label(n, "team"); got.known {
		t.Fatalf("team known %+v before any list worked", got)
	}
	if on, ok := m.last(); !ok || on {
		t.Fatalf("synced metric %v (set %v), want 0 while listing fails", on, ok)
	}
	api.set(nil, nil)
	w := api.next(t)
	for ns, wt := range map[string]want{"team": {"baseline", true, true}, "open": {"privileged", true, true}, "plain": {"", false, true}, "new": {}} {
		if got := label(n, ns); got != wt {
			t.Errorf("after the list, %s: %+v, want %+v", ns, got, wt)
		}
	}
	if on, _ := m.last(); !on {
		t.Error("synced metric 0 after a list")
	}

	// the watch's changes
	w <- WatchEvent{Type: "MODIFIED", Namespace: Namespace{Name: "team", Labels: map[string]string{enforce: "privileged"}}, ResourceVersion: "5"}
	w <- WatchEvent{Type: "ADDED", Namespace: Namespace{Name: "new", Labels: map[string]string{enforce: "restricted"}}, ResourceVersion: "6"}
	w <- WatchEvent{Type: "DELETED", Namespace: Namespace{Name: "open"}, ResourceVersion: "7"}
	w <- WatchEvent{Type: "BOOKMARK", ResourceVersion: "8"}
	eventually(t, "the watch's changes", func() bool {
		return label(n, "team") == want{"privileged", true, true} && label(n, "new") == want{"restricted", true, true} && !label(n, "open").known
	})

	// the API server ends the watch: taken up again, nothing listed
	api.mu.Lock()
	lists := api.lists
	api.mu.Unlock()
	w <- io.EOF
	w = api.next(t)

	// broken, and the API server unreachable: the labels last read stay,
	// and the list is tried again (not only the watch); the API server
	// holds what its watch said
	api.set(errors.New("connection refused"), map[string]map[string]string{"team": {enforce: "privileged"}, "new": {enforce: "restricted"}, "plain": {"app": "x"}})
	w <- fmt.Errorf("%w: reset", ErrUnavailable)
	eventually(t, "the list tried again", func() bool { api.mu.Lock(); defer api.mu.Unlock(); return api.lists > lists+1 })
	api.set(nil, nil)
	w = api.next(t) // listed and watched again
	m.mu.Lock()
	if h := m.on; len(h) < 2 || h[len(h)-2] {
		t.Errorf("synced metric history %v: want 0 while the watch was broken, 1 once it is back", h)
	}
	m.mu.Unlock()
	if got := label(n, "team"); got != (want{"privileged", true, true}) {
		t.Fatalf("team after a broken watch: %+v, want the label last read", got)
	}

	// expired: listed again, as the API server has it now
	api.set(nil, map[string]map[string]string{"team": {enforce: "restricted"}})
	w <- fmt.Errorf("%w: too old", ErrExpired)
	w = api.next(t)
	for ns, wt := range map[string]want{"team": {"restricted", true, true}, "new": {}, "plain": {}} {
		if got := label(n, ns); got != wt {
			t.Errorf("after the relist, %s: %+v, want %+v", ns, got, wt)
		}
	}
	_ = w
	cancel()
	<-done
}

// told records the namespaces a cache said became known or changed.
type told struct {
	mu    sync.Mutex
	names []string
}

func (t *told) add(ns string) { t.mu.Lock(); t.names = append(t.names, ns); t.mu.Unlock() }

func (t *told) get() []string { t.mu.Lock(); defer t.mu.Unlock(); return slices.Clone(t.names) }

// A namespace's level that becomes known (a list) or changes (the watch,
// a relist) is told at once, so that the pods held back for it are synced;
// a change of another label, or a list that changes nothing, tells
// nothing.
func TestALevelThatBecomesKnownOrChangesIsTold(t *testing.T) {
	api := newFakeNamespaces()
	api.set(nil, map[string]map[string]string{"team": {enforce: "baseline"}, "plain": {"app": "x"}})
	n := NewNamespaces(api, time.Hour, nil, logrus.NewEntry(logrus.New()))
	n.retryMin, n.retryMax = time.Millisecond, 2*time.Millisecond
	heard := &told{}
	n.OnChange(heard.add)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() { n.Run(ctx); close(done) }()
	w := api.next(t)
	if got := heard.get(); !slices.Equal(sorted(got), []string{"plain", "team"}) {
		t.Fatalf("after the first list: told %v, want plain and team", got)
	}
	w <- WatchEvent{Type: "MODIFIED", Namespace: Namespace{Name: "team", Labels: map[string]string{enforce: "baseline", "owner": "x"}}}
	w <- WatchEvent{Type: "MODIFIED", Namespace: Namespace{Name: "plain", Labels: map[string]string{enforce: "privileged"}}}
	w <- WatchEvent{Type: "ADDED", Namespace: Namespace{Name: "new"}}
	eventually(t, "the watch's changes told", func() bool { return len(heard.get()) >= 4 })
	if got := heard.get(); !slices.Equal(got[2:], []string{"plain", "new"}) {
		t.Fatalf("told %v, want plain (relabelled) then new (known), and not team (another label)", got)
	}
	api.set(nil, map[string]map[string]string{"team": {enforce: "baseline"}, "plain": {enforce: "privileged"}, "new": {enforce: "restricted"}})
	w <- fmt.Errorf("%w: too old", ErrExpired)
	api.next(t)
	if got := heard.get(); !slices.Equal(got[4:], []string{"new"}) {
		t.Fatalf("after a relist: told %v, want new alone (the one whose level changed)", got[4:])
	}
	cancel()
	<-done
}

func sorted(xs []string) []string { xs = slices.Clone(xs); slices.Sort(xs); return xs }

// clockedNamespaces: a cache bound to 5m over a fake whose namespace "open"
// is privileged, retrying at once, on a clock the test moves with advance,
// telling heard of every change.
func clockedNamespaces() (*fakeNamespaces, *Namespaces, func(time.Duration), *told) {
	api := newFakeNamespaces()
	api.set(nil, map[string]map[string]string{"open": {enforce: "privileged"}})
	n := NewNamespaces(api, 5*time.Minute, nil, logrus.NewEntry(logrus.New()))
	n.retryMin, n.retryMax = time.Millisecond, 2*time.Millisecond
	var mu sync.Mutex
	now := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	n.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	heard := &told{}
	n.OnChange(heard.add)
	return api, n, advance, heard
}

// Issue 37: labels read longer ago than kubernetes.labels_max_age while
// every list and watch fails (an expired token answers 401) grant
// nothing: every namespace is then not known, saying why, and /healthz
// says so; the list is tried again all along, and once it works the
// labels are known again and every namespace is told (its held-back pods
// are synced).
func TestLabelsOlderThanTheBoundGrantNothing(t *testing.T) {
	api, n, advance, heard := clockedNamespaces()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() { n.Run(ctx); close(done) }()
	w := api.next(t)
	if got := label(n, "open"); got != (want{"privileged", true, true}) || n.Health(ctx) != nil {
		t.Fatalf("after the list: %+v, health %v", got, n.Health(ctx))
	}
	denied := fmt.Errorf("%w (%w): HTTP 401: Unauthorized", ErrAPI, ErrDenied)
	api.set(denied, nil)
	w <- denied // the watch refused, and every list after it
	eventually(t, "lists tried again", func() bool { api.mu.Lock(); defer api.mu.Unlock(); return api.lists >= 4 })
	advance(4 * time.Minute)
	if got := label(n, "open"); got != (want{"privileged", true, true}) {
		t.Fatalf("within the bound: %+v, want the labels last read", got)
	}
	advance(2 * time.Minute)
	_, _, why := enforceLabel(n, "open")
	if !strings.Contains(why, "kubernetes.labels_max_age = 5m0s") || n.Health(ctx) == nil {
		t.Fatalf("past the bound: unknown %q, health %v; want not known, saying why, and unhealthy", why, n.Health(ctx))
	}
	told := len(heard.get())
	api.set(nil, nil)
	api.next(t) // listed: watching again
	if got := label(n, "open"); got != (want{"privileged", true, true}) || n.Health(ctx) != nil {
		t.Fatalf("once listed again: %+v, health %v", got, n.Health(ctx))
	}
	if got := heard.get()[told:]; !slices.Equal(got, []string{"open"}) {
		t.Fatalf("told %v once listed again, want open (known again)", got)
	}
	cancel()
	<-done
}

// Issue 46: labels age from the API server's last word, not its last
// failure. A watch that stays open and sends nothing (an API server or a
// proxy holding it) does not keep them fresh: past the bound they grant
// nothing (at ten times the bound too), and a bookmark or an event makes
// them current again. The watch asks for a timeout within half the bound,
// and one that stays open past it is ended and the namespaces listed
// again.
func TestASilentWatchAgesTheLabels(t *testing.T) {
	api, n, advance, heard := clockedNamespaces()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() { n.Run(ctx); close(done) }()
	w := api.next(t)
	api.mu.Lock()
	asked := api.timeout
	api.mu.Unlock()
	if asked <= 0 || asked > 150*time.Second {
		t.Fatalf("the watch asked a timeout of %s, want one within half the bound (2m30s)", asked)
	}
	advance(4 * time.Minute) // silent, within the bound
	if got := label(n, "open"); got != (want{"privileged", true, true}) {
		t.Fatalf("within the bound: %+v", got)
	}
	for _, d := range []time.Duration{2 * time.Minute, 44 * time.Minute} { // past it, and ten times it
		advance(d)
		if _, _, why := enforceLabel(n, "open"); !strings.Contains(why, "nothing has been heard from the API server") || n.Health(ctx) == nil {
			t.Fatalf("a silent watch past the bound: %q, health %v; want not known and unhealthy", why, n.Health(ctx))
		}
	}
	told := len(heard.get())
	w <- WatchEvent{Type: "BOOKMARK", ResourceVersion: "7"}
	// the listener is told after the lock that made the view current is
	// let go: wait for what it was told, not for health
	eventually(t, "the bookmark heard and told", func() bool { return len(heard.get()) > told })
	if n.Health(ctx) != nil {
		t.Fatalf("after a bookmark: unhealthy: %v", n.Health(ctx))
	}
	if got := label(n, "open"); got != (want{"privileged", true, true}) {
		t.Fatalf("after a bookmark: %+v", got)
	}
	if got := heard.get()[told:]; !slices.Equal(got, []string{"open"}) {
		t.Fatalf("told %v after the bookmark, want open (known again)", got)
	}
	cancel()
	<-done

	// a watch that stays open past its timeout is ended here, and the
	// namespaces listed again
	api = newFakeNamespaces()
	n = NewNamespaces(api, 2*time.Second, nil, logrus.NewEntry(logrus.New()))
	n.retryMin, n.retryMax, n.grace = time.Millisecond, 2*time.Millisecond, 10*time.Millisecond
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	done = make(chan struct{})
	go func() { n.Run(ctx); close(done) }()
	api.next(t)
	api.next(t) // the first watch ended after its 1 s and 10 ms: listed and watching again
	api.mu.Lock()
	lists := api.lists
	api.mu.Unlock()
	if lists < 2 {
		t.Fatalf("%d lists: the silent watch was not ended and the namespaces listed again", lists)
	}
	cancel()
	<-done
}

// Issue 54: a watch that sends only bookmarks keeps the labels heard, but
// what it does not send (a relabel) is read only at the next list. Each
// watch is ended, and the namespaces listed again, within three quarters
// of kubernetes.labels_max_age, at the smallest bound validation takes
// and at the largest: a relabel the watch never sends is read within the
// bound.
func TestABookmarkOnlyWatchIsListedAgainWithinTheBound(t *testing.T) {
	for _, maxAge := range []time.Duration{2 * time.Second, 10 * time.Second, 29 * time.Second, 5 * time.Minute, 24 * time.Hour} {
		api := newFakeNamespaces()
		n := NewNamespaces(api, maxAge, nil, logrus.NewEntry(logrus.New()))
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { n.Run(ctx); close(done) }()
		api.next(t)
		api.mu.Lock()
		asked, window := api.timeout, api.window
		api.mu.Unlock()
		if window <= 0 || window > maxAge*3/4 || asked > window || asked.Round(time.Second) < time.Second {
			t.Errorf("labels_max_age %s: the watch asked %s and was given %s, want a whole second or more and within three quarters of the bound", maxAge, asked, window)
		}
		cancel()
		<-done
	}
	api := newFakeNamespaces()
	api.set(nil, map[string]map[string]string{"open": {"pod-security.kubernetes.io/enforce": "privileged"}})
	n := NewNamespaces(api, 2*time.Second, nil, logrus.NewEntry(logrus.New()))
	n.retryMin, n.retryMax = time.Millisecond, 2*time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() { n.Run(ctx); close(done) }()
	w := api.next(t)
	api.set(nil, map[string]map[string]string{"open": {"pod-security.kubernetes.io/enforce": "restricted"}}) // never sent
	stop := make(chan struct{})
	go func() { // bookmarks only, every 100 ms, on every watch
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case w <- WatchEvent{Type: "BOOKMARK", ResourceVersion: fmt.Sprint(100 + i)}:
			case w = <-api.watches:
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	eventually(t, "the relabel read by a list", func() bool { return label(n, "open").value == "restricted" })
	close(stop)
	cancel()
	<-done
}

// The core decides with the labels the cache publishes (issue 44): at
// once when it listens, and after every list and event, a bookmark
// included (the labels' age is the API server's last word); a value
// published is never changed by what comes after.
func TestTheLabelsArePublishedAsValues(t *testing.T) {
	api := newFakeNamespaces()
	api.set(nil, map[string]map[string]string{"open": {enforce: "privileged"}})
	n := NewNamespaces(api, 5*time.Minute, nil, logrus.NewEntry(logrus.New()))
	var mu sync.Mutex
	var got []admission.Labels
	n.OnPublish(func(l admission.Labels) { mu.Lock(); got = append(got, l); mu.Unlock() })
	published := func() []admission.Labels { mu.Lock(); defer mu.Unlock(); return slices.Clone(got) }
	if p := published(); len(p) != 1 || !p[0].Heard.IsZero() {
		t.Fatalf("published at once: %+v, want the labels never read", p)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() { n.Run(ctx); close(done) }()
	w := api.next(t)
	first := published()[len(published())-1]
	if v, _, why := first.EnforceLabel("open"); why != "" && first.Heard.IsZero() || v != "privileged" {
		t.Fatalf("after the list: %+v", first)
	}
	w <- WatchEvent{Type: "MODIFIED", Namespace: Namespace{Name: "open", Labels: map[string]string{enforce: "baseline"}}, ResourceVersion: "5"}
	eventually(t, "the event published", func() bool { return len(published()) >= 3 })
	if v, _, _ := first.EnforceLabel("open"); v != "privileged" {
		t.Fatalf("the value published before the event changed: %q", v)
	}
	if v, _, _ := published()[2].EnforceLabel("open"); v != "baseline" {
		t.Fatalf("after the event: %q, want baseline", v)
	}
	before := len(published())
	w <- WatchEvent{Type: "BOOKMARK", ResourceVersion: "6"}
	eventually(t, "the bookmark published", func() bool { return len(published()) > before })
	cancel()
	<-done
}

// enforceLabel is what the cache says of ns's enforce label as of now.
func enforceLabel(n *Namespaces, ns string) (string, bool, string) {
	v := n.view()
	v.At = n.now()
	return v.EnforceLabel(ns)
}
