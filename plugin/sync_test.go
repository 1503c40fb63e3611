package plugin

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/config"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/admission"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/request"
)

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

// Two pods asking for one host port at once, with HNS at 50 ms a call:
// exactly one holds it, and the other is told a HostPortConflict that names
// it, on containerd's event path (where nothing serializes two starts) and
// on NRI's; nothing is left behind, and once both stop the port goes to
// the next pod.
func TestTwoStartsOnOnePortOneHoldsItAndTheOtherIsToldWho(t *testing.T) {
	for _, path := range []string{PathEvents, PathNRI} {
		t.Run(path, func(t *testing.T) {
			for round := range 5 {
				rep := &reports{}
				f := newFixture(t, func(o *Options) { o.Reporter, o.Deadline = rep, 20*time.Second })
				f.sim.SetLatency(50 * time.Millisecond)
				a := f.namedPod("a", "shop", "8080:80", "")
				b := f.namedPod("b", "shop", "8080:80", "")
				start := func(p Pod) <-chan error {
					if path == PathEvents {
						return f.started(p.ID)
					}
					done := make(chan error, 1)
					go func() { done <- f.core.StartPod(ctx, p) }()
					return done
				}
				da, db := start(a), start(b)
				errs := map[string]error{"a": waitResult(t, da), "b": waitResult(t, db)}
				winner, loser := a, b
				if errs["a"] != nil {
					winner, loser = b, a
				}
				if errs[winner.ID] != nil {
					t.Fatalf("round %d: both failed: a %v; b %v", round, errs["a"], errs["b"])
				}
				err := errs[loser.ID]
				var ce *ConflictError
				if !errors.As(err, &ce) || ce.HolderID != winner.ID || !strings.Contains(err.Error(), "shop/"+winner.Name) ||
					failureReason(err) != ReasonConflict || strings.Contains(err.Error(), "no pod this plugin manages") {
					t.Fatalf("round %d: the loser %s was told %v; want a HostPortConflict naming shop/%s", round, loser.ID, err, winner.Name)
				}
				if len(f.endpoints(winner.ID)) != 1 || len(f.endpoints(loser.ID)) != 0 {
					t.Fatalf("round %d: endpoints %s %+v, %s %+v", round, winner.ID, f.endpoints(winner.ID), loser.ID, f.endpoints(loser.ID))
				}
				if got := f.core.Failing(); got[ReasonConflict] != 1 || len(got) != 1 {
					t.Fatalf("round %d: failing %v, want the loser under %s", round, got, ReasonConflict)
				}
				for _, p := range []Pod{a, b} {
					if path == PathEvents {
						if err := stoppedAndWait(t, f, p); err != nil {
							t.Fatal(err)
						}
					} else if _, err := f.stop(p); err != nil {
						t.Fatal(err)
					}
				}
				if n := len(f.sim.State().Endpoints); n != 0 {
					t.Fatalf("round %d: %d endpoints left after both stopped", round, n)
				}
				c := f.namedPod("c", "shop", "8080:80", "")
				if err := startedAndWait(t, f, c); err != nil || len(f.endpoints("c")) != 1 {
					t.Fatalf("round %d: the next pod: %v, endpoints %+v", round, err, f.endpoints("c"))
				}
			}
		})
	}
}

// An endpoint in place exempts exactly the mappings it holds: a mapping it
// does not hold yet is admitted as a new pod's would be, whatever
// changed since (a relabel, a config change, a restart). Without the
// change, a restart adopts the endpoint as it is.
func TestAnEndpointInPlaceExemptsOnlyTheMappingsItHolds(t *testing.T) {
	type change struct {
		label  string                     // the namespace's label after
		inputs Inputs                     // the sources after
		mgr    func(*hcn.ManagerConfig)   // the manager after
		opts   func(*Options)             // the options after
		want   func(ep hcn.Endpoint) bool // what the endpoint must still be
		refuse error                      // what the pod is told, nil: mapped
	}
	onlyTCP8080 := func(ep hcn.Endpoint) bool {
		return len(ep.PortMappings) == 1 && ep.PortMappings[0].ExternalPort == 8080 && !ep.PortMappings[0].IsIPv6()
	}
	l2 := func(c *hcn.ManagerConfig) {
		c.Network = hcn.NetworkSpec{Name: "l2", Type: hcn.NetworkL2Bridge, Subnet: "10.1.0.0/24", Gateway: "10.1.0.1"}
		c.AllowCNINetwork = true
	}
	for _, tc := range []struct {
		name       string
		annotation string
		hostPorts  string
		first      change
		then       change
	}{
		{"annotation source added in a namespace relabelled restricted", "3389:3389", `{"container_port":80,"host_port":8080}`,
			change{label: "privileged", inputs: Inputs{CRI: true}},
			change{label: "restricted", inputs: Inputs{CRI: true, Annotations: true}, want: onlyTCP8080, refuse: admission.ErrDenied}},
		{"dual stack turned on without ::/0 in host_ips", "8080:80", "",
			change{label: "privileged", inputs: Inputs{Annotations: true}, mgr: l2, opts: hostIPs("0.0.0.0/0")},
			change{label: "privileged", inputs: Inputs{Annotations: true}, mgr: func(c *hcn.ManagerConfig) { l2(c); c.IPv6 = true },
				opts: func(o *Options) {
					hostIPs("0.0.0.0/0")(o)
					o.Policy.DualStack = true
					o.Admission = o.Admission.WithDualStack(true)
				},
				want: onlyTCP8080, refuse: admission.ErrDenied}},
		{"nothing changed", "3389:3389", `{"container_port":80,"host_port":8080}`,
			change{label: "privileged", inputs: Inputs{CRI: true}},
			change{label: "restricted", inputs: Inputs{CRI: true}, want: onlyTCP8080}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nss := &namespaces{labels: map[string]string{"shop": tc.first.label}}
			rep := &reports{}
			f, _ := podSecurityFixture(t, nss, func(o *Options) { o.Reporter = rep })
			apply := func(c change) {
				mc := testManagerConfig()
				if c.mgr != nil {
					c.mgr(&mc)
				}
				f.restartWith(t, mc, func(o *Options) {
					pol, err := admission.Compile(config.DefaultAdmission())
					if err != nil {
						t.Fatal(err)
					}
					o.Admission, o.Inputs, o.Policy.DualStack = pol, c.inputs, false
					if c.opts != nil {
						c.opts(o)
					}
				})
				nss.set("shop", c.label)
				if err := f.core.LoadPorts(ctx); err != nil {
					t.Fatal(err)
				}
			}
			apply(tc.first)
			f.namedPod("web", "shop", tc.annotation, tc.hostPorts)
			if err := startedAndWait(t, f, Pod{ID: "web"}); err != nil {
				t.Fatal(err)
			}
			before := f.endpoints("web")
			if len(before) != 1 || !onlyTCP8080(before[0]) {
				t.Fatalf("before: %+v", before)
			}
			apply(tc.then)
			if _, err := f.core.ReconcileAll(ctx); err != nil {
				t.Fatal(err)
			}
			after := f.endpoints("web")
			if len(after) != 1 || !tc.then.want(after[0]) || after[0].ID != before[0].ID {
				t.Fatalf("after: %+v; want %s kept as it was (%+v)", after, before[0].ID, before[0].PortMappings)
			}
			got, ok := rep.last()
			switch {
			case tc.then.refuse == nil && (!ok || !got.Mapped):
				t.Fatalf("report %+v, want mapped", got)
			case tc.then.refuse != nil && (!ok || got.Mapped || !errors.Is(got.Err, tc.then.refuse)):
				t.Fatalf("report %+v, want the new mapping refused (%v)", got, tc.then.refuse)
			}
		})
	}
}

// hostIPs sets admission.host_ips.
func hostIPs(ips ...string) func(*Options) {
	return func(o *Options) {
		a := config.DefaultAdmission()
		a.HostIPs = ips
		pol, err := admission.Compile(a)
		if err != nil {
			panic(err)
		}
		o.Admission = pol
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

// containerd not answering is counted and told as containerd's failure,
// not as HNS's, and retried until it answers.
func TestContainerdUnreachableIsToldAsContainerds(t *testing.T) {
	rep := &reports{}
	f := newFixture(t, func(o *Options) { o.Reporter = rep }, retryEvery(5*time.Millisecond))
	p := f.sandbox("p", "8080:80")
	f.store.mu.Lock()
	f.store.failSandbox = fmt.Errorf("connecting to containerd at /run/containerd.sock: %w", ErrContainerd)
	f.store.mu.Unlock()
	done := make(chan error, 1)
	go func() { done <- f.startRetrying(p) }()
	eventually(t, "the pod counted as failing", func() bool { return len(f.core.Failing()) > 0 })
	if got := f.core.Failing(); got[ReasonContainerd] != 1 || len(got) != 1 {
		t.Fatalf("failing %v, want the pod under %s", got, ReasonContainerd)
	}
	got, ok := rep.last()
	if !ok || got.Mapped || got.Reason != ReasonContainerd || !strings.Contains(got.Err.Error(), "default/pod-p") {
		t.Fatalf("report %+v (sent %v), want the owners told %s naming the pod", got, ok, ReasonContainerd)
	}
	f.store.mu.Lock()
	f.store.failSandbox = nil
	f.store.mu.Unlock()
	if err := waitResult(t, done); err != nil || len(f.endpoints("p")) != 1 {
		t.Fatalf("once containerd answers: %v, endpoints %+v", err, f.endpoints("p"))
	}
}
