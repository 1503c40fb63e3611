package plugin

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/config"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn/hcnsim"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/admission"
)

// namespaces is what the API server said of the namespaces' enforce
// labels, changed by the test ("-": no label; absent: never read).
type namespaces struct {
	mu     sync.Mutex
	labels map[string]string
}

func (n *namespaces) EnforceLabel(ns string) (string, bool, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	v, ok := n.labels[ns]
	return v, ok && v != "-", ok
}

func (n *namespaces) set(ns, label string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.labels[ns] = label
}

// podSecurityFixture is a core with the default admission policy (Pod
// Security enforced, unlabelled namespaces privileged) over nss.
func podSecurityFixture(t *testing.T, nss *namespaces, opts ...func(*Options)) (*fixture, *reports) {
	t.Helper()
	pol, err := admission.Compile(config.DefaultAdmission())
	if err != nil {
		t.Fatal(err)
	}
	rep := &reports{}
	f := newFixture(t, append([]func(*Options){func(o *Options) {
		o.Admission, o.Namespaces, o.Reporter = pol, nss, rep
	}}, opts...)...)
	return f, rep
}

func (f *fixture) podIn(id, namespace, annotation string) Pod {
	p := f.sandbox(id, annotation)
	p.Namespace = namespace
	return p
}

// Issue 31: the annotation obeys the namespace's Pod Security level; a
// refused pod leaves nothing in HNS and is told why; the level is read
// at each pod's start, so relabelling a namespace changes the next pod's
// outcome; hostPort is the API server's to judge, not the plugin's.
func TestAnnotationObeysPodSecurity(t *testing.T) {
	nss := &namespaces{labels: map[string]string{"open": "privileged", "team": "baseline", "locked": "restricted", "plain": "-"}}
	f, rep := podSecurityFixture(t, nss, func(o *Options) { o.Inputs = Inputs{Annotations: true, CRI: true} })
	tests := []struct {
		id, ns, ask string
		refuse      bool
	}{
		{"open", "open", "8080:80", false},
		{"team", "team", "8090:80", true},
		{"locked", "locked", "8091:80", true},
		{"plain", "plain", "8092:80", false}, // the default level: privileged
	}
	for _, tt := range tests {
		p := f.podIn(tt.id, tt.ns, tt.ask)
		_, err := f.start(p)
		if !tt.refuse {
			if err != nil || len(f.endpoints(tt.id)) != 1 {
				t.Errorf("%s: start = %v with %d endpoints, want mapped", tt.ns, err, len(f.endpoints(tt.id)))
			}
			continue
		}
		if !errors.Is(err, admission.ErrPodSecurity) || !strings.Contains(err.Error(), `namespace "`+tt.ns+`"`) {
			t.Errorf("%s: start = %v, want refused by Pod Security naming the namespace", tt.ns, err)
		}
		if got, ok := rep.last(); !ok || got.Mapped || got.Reason != ReasonPodSecurity || got.Pod.Name != p.Name {
			t.Errorf("%s: report %+v, want %s for %s", tt.ns, got, ReasonPodSecurity, p.Name)
		}
		if n := len(f.endpoints(tt.id)); n != 0 {
			t.Errorf("%s: %d endpoints for a refused pod", tt.ns, n)
		}
	}
	if n := f.sim.Calls()[hcnsim.OpCreateEndpoint]; n != 2 {
		t.Errorf("HNS asked to create %d endpoints, want 2 (the refused pods' never)", n)
	}
	// counted as failing while they run, and no longer once stopped
	if got := f.core.Failing(); got[ReasonPodSecurity] != 2 || len(got) != 1 {
		t.Errorf("failing %v, want the 2 refused pods under %s", got, ReasonPodSecurity)
	}
	if _, err := f.stop(f.podIn("team", "team", "8090:80")); err != nil {
		t.Fatal(err)
	}
	if got := f.core.Failing(); got[ReasonPodSecurity] != 1 {
		t.Errorf("failing %v after one refused pod stopped, want 1", got)
	}
	// relabelled: the next pod's outcome changes, no restart
	nss.set("team", "privileged")
	if _, err := f.start(f.podIn("team-2", "team", "8093:80")); err != nil || len(f.endpoints("team-2")) != 1 {
		t.Errorf("after relabelling team privileged: %v, %d endpoints", err, len(f.endpoints("team-2")))
	}
	nss.set("open", "baseline")
	if _, err := f.start(f.podIn("open-2", "open", "8094:80")); !errors.Is(err, admission.ErrPodSecurity) {
		t.Errorf("after relabelling open baseline: %v, want refused", err)
	}
	// a hostPort in a restricted namespace passed the API server: mapped
	nss.set("ns", "restricted") // criMeta's pod's namespace
	p := f.podIn("hp", "ns", "")
	f.store.sbs["hp"].Metadata = criMeta("", criPorts(1, 1))
	if _, err := f.start(Pod{ID: p.ID, Partial: true}); err != nil || len(f.endpoints("hp")) != 1 {
		t.Errorf("a hostPort pod in a restricted namespace: %v, %d endpoints; want mapped (the API server judged it)", err, len(f.endpoints("hp")))
	}
}

// A pod whose endpoint is in place keeps it when its namespace is
// relabelled (or the policy changes): a resync neither removes it nor
// reports the pod failed. Pod Security, too, judges pods when they start.
func TestAdmittedPodKeepsItsPorts(t *testing.T) {
	nss := &namespaces{labels: map[string]string{"shop": "privileged"}}
	f, rep := podSecurityFixture(t, nss)
	p := f.podIn("web", "shop", "8080:80")
	if _, err := f.start(p); err != nil {
		t.Fatal(err)
	}
	before := f.endpoints("web")
	nss.set("shop", "restricted")
	if _, err := f.core.ReconcileAll(ctx); err != nil {
		t.Fatal(err)
	}
	if after := f.endpoints("web"); len(after) != 1 || after[0].ID != before[0].ID {
		t.Fatalf("endpoints after the relabel and a resync: %+v, want %s kept", after, before[0].ID)
	}
	if got, _ := rep.last(); !got.Mapped {
		t.Fatalf("the running pod reported %+v after the relabel, want it still mapped", got)
	}
}

// A namespace whose labels were never read: the annotation is held back
// (never granted by default), the pod proceeds without it (fail-open) or
// fails saying why (fail-closed), and once the level is known and allows
// it, the held-back pod is mapped.
func TestUnknownLevelHoldsTheAnnotationBack(t *testing.T) {
	for _, failOpen := range []bool{true, false} {
		name := map[bool]string{true: "fail-open", false: "fail-closed"}[failOpen]
		t.Run(name, func(t *testing.T) {
			nss := &namespaces{labels: map[string]string{}}
			f, rep := podSecurityFixture(t, nss, retryEvery(5*time.Millisecond), func(o *Options) {
				o.FailOpen, o.Deadline = failOpen, 100*time.Millisecond
			})
			p := f.podIn("late", "shop", "8080:80")
			err := f.core.StartPod(ctx, p)
			switch {
			case failOpen && err != nil:
				t.Fatalf("fail-open StartPod: %v", err)
			case !failOpen && (!errors.Is(err, ErrDeadline) || !errors.Is(err, admission.ErrLevelUnknown) || !strings.Contains(err.Error(), `namespace "shop"`)):
				t.Fatalf("fail-closed StartPod: %v, want the deadline and why: the level of namespace shop not known", err)
			}
			never(t, 200*time.Millisecond, "an endpoint for a pod whose namespace's level is not known",
				func() bool { return len(f.endpoints("late")) > 0 })
			if got, ok := rep.last(); !ok || got.Reason != ReasonPodSecurityUnknown {
				t.Fatalf("report %+v (sent %v), want %s", got, ok, ReasonPodSecurityUnknown)
			}
			if got := f.core.Failing(); failOpen && got[ReasonPodSecurityUnknown] != 1 {
				t.Fatalf("failing %v, want the held-back pod under %s", got, ReasonPodSecurityUnknown)
			}
			nss.set("shop", "privileged")
			if failOpen {
				eventually(t, "the held-back pod mapped once its level is known", func() bool { return len(f.endpoints("late")) == 1 })
				eventually(t, "no pod failing once it is mapped", func() bool { return len(f.core.Failing()) == 0 })
				return
			}
			// the pod failed: it is rolled back, and stays so
			never(t, 200*time.Millisecond, "an endpoint for a pod whose start failed", func() bool { return len(f.endpoints("late")) > 0 })
		})
	}
}
