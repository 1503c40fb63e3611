package plugin

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/config"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn/hcnsim"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/admission"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/hostsockets"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/request"
	"k8s.io/apimachinery/pkg/labels"
)

// 3: a sandbox that a resync finds stopped in containerd is final: a later
// /tasks/start (late, or repeated) does not bring its endpoint back.
func TestSandboxAResyncFindsStoppedIsFinal(t *testing.T) {
	f := newFixture(t)
	p := f.eventPod("p", "8080:80")
	if err := startedAndWait(t, f, p); err != nil {
		t.Fatal(err)
	}
	f.store.mu.Lock()
	f.store.tasks["p"] = TaskStopped // its exit event was missed
	f.store.mu.Unlock()
	if _, err := f.core.ReconcileAll(ctx); err != nil {
		t.Fatal(err)
	}
	if eps := f.endpoints("p"); len(eps) != 0 {
		t.Fatalf("the resync kept %+v of a stopped sandbox", eps)
	}
	if err := startedAndWait(t, f, p); err != nil {
		t.Fatalf("late start: %v", err)
	}
	never(t, 300*time.Millisecond, "a late /tasks/start brought the stopped sandbox's endpoint back",
		func() bool { return len(f.endpoints("p")) > 0 })
}

// 5, 6, 7: a change of configuration that changes how a running pod's
// endpoint behaves rebuilds it at the next resync after a restart: its
// OutBoundNAT policy, its route's metric or next hop, its policies'
// local-routed flag. Without the change nothing is rebuilt.
func TestBehaviourChangingConfigurationRebuildsRunningPods(t *testing.T) {
	base := testManagerConfig()
	for _, tc := range []struct {
		name    string
		cfg     func(*hcn.ManagerConfig)
		opt     func(*Options)
		rebuilt func(ep hcn.Endpoint) bool // the new endpoint shows the change
	}{
		{"nothing changed", nil, nil, nil},
		{"outbound_nat on", func(c *hcn.ManagerConfig) { c.OutboundNAT = true }, nil,
			func(ep hcn.Endpoint) bool { return ep.OutboundNAT }},
		{"route_metric", func(c *hcn.ManagerConfig) { c.RouteMetric = 6000 }, nil,
			func(ep hcn.Endpoint) bool { return len(ep.Routes) == 1 && ep.Routes[0].Metric == 6000 }},
		{"default route's next hop", func(c *hcn.ManagerConfig) { c.DefaultRoute = hcn.RouteNone }, nil,
			func(ep hcn.Endpoint) bool { return len(ep.Routes) == 1 && ep.Routes[0].NextHop == "0.0.0.0" }},
		{"local_routed_vip off", nil, func(o *Options) { o.Policy.LocalRoutedVIP = false },
			func(ep hcn.Endpoint) bool { return len(ep.PortMappings) == 1 && ep.PortMappings[0].Flags == 0 }},
	} {
		for _, from := range []bool{false, true} { // and back: off to on, on to off
			if tc.cfg == nil && from {
				continue
			}
			t.Run(fmt.Sprintf("%s/reverse=%v", tc.name, from), func(t *testing.T) {
				f := newFixture(t)
				first, second := base, base
				o1, o2 := func(*Options) {}, func(*Options) {}
				switch {
				case tc.cfg != nil && !from:
					tc.cfg(&second)
				case tc.cfg != nil:
					tc.cfg(&first)
				}
				if tc.opt != nil {
					o2 = tc.opt
				}
				f.restartWith(t, first, o1)
				p := f.eventPod("p", "8080:80") // the resync reads its request from containerd
				if err := f.core.StartPod(ctx, p); err != nil {
					t.Fatal(err)
				}
				before := f.endpoints("p")[0]
				f.restartWith(t, second, o2)
				if _, err := f.core.ReconcileAll(ctx); err != nil {
					t.Fatal(err)
				}
				eps := f.endpoints("p")
				if len(eps) != 1 || eps[0].Namespace == "" {
					t.Fatalf("after the restart: %+v", eps)
				}
				switch {
				case tc.rebuilt == nil && eps[0].ID != before.ID:
					t.Fatalf("rebuilt with nothing changed: %+v -> %+v", before, eps[0])
				case tc.rebuilt != nil && (eps[0].ID == before.ID || (!from && !tc.rebuilt(eps[0])) || (from && tc.rebuilt(eps[0]))):
					t.Fatalf("not rebuilt for the change: %+v -> %+v", before, eps[0])
				}
			})
		}
	}
}

// Unit: the plugin's own endpoint in a pod's namespace is never taken for
// the CNI's: a pod with hostPorts keeps its endpoint over repeated syncs,
// and is told its ports are the plugin's.
func TestOwnEndpointIsNeverTheCNIs(t *testing.T) {
	rep := &reports{}
	f := newFixture(t, func(o *Options) { o.Reporter = rep; o.Inputs = Inputs{Annotations: true, CRI: true} })
	f.sandbox("s", "")
	f.store.sbs["s"].Metadata = criMeta("", criPorts(1, 1))
	if err := f.startRetrying(Pod{ID: "s", Partial: true}); err != nil {
		t.Fatal(err)
	}
	first := f.endpoints("s")
	if len(first) != 1 {
		t.Fatalf("endpoints %+v", first)
	}
	for range 3 {
		if _, err := f.core.ReconcileAll(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if eps := f.endpoints("s"); len(eps) != 1 || eps[0].ID != first[0].ID {
		t.Fatalf("after resyncs %+v, want %s kept", eps, first[0].ID)
	}
	got, _ := rep.last()
	if got.Endpoint != first[0].ID || len(got.CNI) != 0 {
		t.Fatalf("report %+v: its own endpoint counted as the CNI's", got)
	}
}

// Issue 30, 7: a host port HNS says is taken (HCN_E_PORT_ALREADY_EXISTS)
// while no pod of the plugin holds it (another process, a CNI endpoint in
// another namespace, a port HNS kept after a delete) fails the pod as a
// host-port conflict whose text says so and how to see who holds it.
func TestPortHNSHoldsIsAConflictThatSaysWho(t *testing.T) {
	rep := &reports{}
	f := newFixture(t, func(o *Options) { o.Reporter = rep })
	netID, err := f.core.mgr.EnsureNetwork(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.sim.CreateEndpoint(ctx, hcn.EndpointSpec{Name: "someone-else", NetworkID: netID,
		PortMappings: []hcn.PortMappingPolicy{{Protocol: hcn.TCP, ExternalPort: 8080, InternalPort: 80}}}); err != nil {
		t.Fatal(err)
	}
	err = f.core.StartPod(ctx, f.sandbox("p", "8080:80"))
	if !errors.Is(err, hcn.ErrPortInUse) || Classify(err) != ClassConflict {
		t.Fatalf("StartPod = %v (class %s), want the port in use, a conflict", err, Classify(err))
	}
	for _, want := range []string{"pod default/pod-p", "no pod this plugin manages held it", "Get-HnsEndpoint", "kubernetes#137530"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if got, ok := rep.last(); !ok || got.Reason != ReasonConflict {
		t.Errorf("report %+v, want %s", got, ReasonConflict)
	}
}

// Issue 56: a host port a program of the node holds is never mapped: the
// pod is refused as a host-port conflict naming the program and its PID,
// nothing is built, and once the program has let the port go the pod is
// mapped at its next sync. A program that binds a port after the pod
// holds it does not unmap the pod, and the node's sockets are read only
// for ports the pod does not hold yet.
func TestAPortAProgramOfTheNodeHoldsIsNeverMapped(t *testing.T) {
	rep := &reports{}
	table := &hostTable{}
	f := newFixture(t, func(o *Options) { o.Reporter, o.Sockets = rep, table })
	sql := hostsockets.Socket{Protocol: hcn.TCP, Addr: netip.MustParseAddr("0.0.0.0"), Port: 1433, PID: 2100, Program: "sqlservr.exe"}
	table.set(sql)
	p := f.sandbox("db", "1433:1433")
	err := f.core.StartPod(ctx, p)
	var he *hostsockets.HeldError
	if !errors.As(err, &he) || he.By != sql || Classify(err) != ClassConflict {
		t.Fatalf("StartPod = %v (class %s), want refused naming sqlservr.exe", err, Classify(err))
	}
	for _, want := range []string{"pod default/pod-db", "*:1433->1433/tcp", "sqlservr.exe (PID 2100) listening on 0.0.0.0:1433/tcp"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if got, ok := rep.last(); !ok || got.Mapped || got.Reason != ReasonHeldByNode || !strings.Contains(got.Err.Error(), "sqlservr.exe (PID 2100)") {
		t.Errorf("report %+v, want %s naming the program", got, ReasonHeldByNode)
	}
	if eps := f.endpoints("db"); len(eps) != 0 {
		t.Fatalf("endpoints %+v: want nothing built", eps)
	}
	table.set() // the program stopped
	if _, err := f.core.Reconcile(ctx, []Pod{p}); err != nil {
		t.Fatalf("Reconcile after the program let the port go: %v", err)
	}
	if eps := f.endpoints("db"); len(eps) != 1 {
		t.Fatalf("endpoints %+v: want the pod mapped once the port is free", eps)
	}
	reads := table.count()
	table.set(sql) // a program binds the port the pod holds
	if _, err := f.core.Reconcile(ctx, []Pod{p}); err != nil {
		t.Fatalf("Reconcile with a program bound after the mapping: %v", err)
	}
	if eps := f.endpoints("db"); len(eps) != 1 || table.count() != reads {
		t.Fatalf("endpoints %+v, %d more reads: want the pod kept mapped and the sockets not read for a port it holds", eps, table.count()-reads)
	}
}

func TestMappingsComeFromTheEnabledSources(t *testing.T) {
	captured, err := os.ReadFile("request/testdata/cri-sandbox-metadata.json")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		sources Inputs
		meta    []byte
		want    []hcn.PortMappingPolicy
		err     string
	}{
		{"captured record, annotations only", Inputs{Annotations: true}, captured,
			[]hcn.PortMappingPolicy{{Protocol: hcn.TCP, ExternalPort: 8443, InternalPort: 443, VIP: "10.0.0.4", Flags: 1}}, ""},
		{"captured record, CRI only", Inputs{CRI: true}, captured,
			[]hcn.PortMappingPolicy{{Protocol: hcn.TCP, ExternalPort: 8080, InternalPort: 80, Flags: 1},
				{Protocol: hcn.UDP, ExternalPort: 5353, InternalPort: 53, VIP: "10.0.0.4", Flags: 1}}, ""},
		{"captured record, both", Inputs{Annotations: true, CRI: true}, captured,
			[]hcn.PortMappingPolicy{{Protocol: hcn.TCP, ExternalPort: 8080, InternalPort: 80, Flags: 1},
				{Protocol: hcn.TCP, ExternalPort: 8443, InternalPort: 443, VIP: "10.0.0.4", Flags: 1},
				{Protocol: hcn.UDP, ExternalPort: 5353, InternalPort: 53, VIP: "10.0.0.4", Flags: 1}}, ""},
		{"both give the same mapping: counted once", Inputs{Annotations: true, CRI: true},
			criMeta("8080:80", `{"container_port":80,"host_port":8080}`),
			[]hcn.PortMappingPolicy{{Protocol: hcn.TCP, ExternalPort: 8080, InternalPort: 80, Flags: 1}}, ""},
		{"they disagree", Inputs{Annotations: true, CRI: true},
			criMeta("8080:80", `{"container_port":81,"host_port":8080}`), nil, "disagree"},
		{"CRI SCTP", Inputs{CRI: true}, criMeta("", `{"protocol":2,"container_port":81,"host_port":8080}`), nil, "SCTP"},
		{"CRI ignored when not enabled", Inputs{Annotations: true}, criMeta("", `{"protocol":2,"container_port":81,"host_port":8080}`), nil, ""},
		{"malformed metadata: nothing known, nothing failed", Inputs{CRI: true}, []byte(`{"Version":"v1"`), nil, ""},
		{"CRI hostPorts at the cap", Inputs{CRI: true}, criMeta("", criPorts(1, 3)),
			[]hcn.PortMappingPolicy{{Protocol: hcn.TCP, ExternalPort: 9001, InternalPort: 80, Flags: 1},
				{Protocol: hcn.TCP, ExternalPort: 9002, InternalPort: 80, Flags: 1},
				{Protocol: hcn.TCP, ExternalPort: 9003, InternalPort: 80, Flags: 1}}, ""},
		{"CRI hostPorts over the cap", Inputs{CRI: true}, criMeta("", criPorts(1, 4)), nil,
			"pod ns/p: invalid pod request: CRI hostPorts: 4 entries, more than the limit of 3 (plugin.max_mappings_per_pod)"},
		{"annotation and CRI count together", Inputs{Annotations: true, CRI: true}, criMeta("9001:80,9002:80", criPorts(2, 4)), nil,
			"annotation and CRI hostPorts together: 4 host ports (a range counts its ports), more than the limit of 3"},
		{"annotation over the cap", Inputs{Annotations: true}, criMeta("9001:80,9002:80,9003:80,9004:80", ""), nil,
			"pod ns/p: annotation hcn.nri.io/port-mappings: invalid pod request: 4 entries, more than the limit of 3 (plugin.max_mappings_per_pod)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			f.core.opt.Inputs = tt.sources
			f.core.opt.Limits.MaxMappings = 3
			p := f.sandbox("s", "")
			f.store.sbs["s"].Metadata = tt.meta
			_, err := f.start(Pod{ID: "s", Partial: true})
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) || !errors.Is(err, ErrInvalidPod) {
					t.Fatalf("Ensure = %v, want ErrInvalidPod mentioning %q", err, tt.err)
				}
				if len(f.endpoints(p.ID)) != 0 {
					t.Fatal("a rejected pod got an endpoint")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			eps := f.endpoints(p.ID)
			if len(tt.want) == 0 {
				if len(eps) != 0 {
					t.Fatalf("endpoints %+v, want none", eps)
				}
				return
			}
			if len(eps) != 1 || !hcn.SamePolicies(eps[0].PortMappings, tt.want) {
				t.Fatalf("endpoints %+v, want one with %v", eps, tt.want)
			}
		})
	}
}

func TestNRIPodUsesCRIHostPorts(t *testing.T) {
	f := newFixture(t)
	f.core.opt.Inputs = Inputs{Annotations: true, CRI: true}
	p := f.sandbox("n", "") // an NRI pod without the annotation
	f.store.sbs["n"].Metadata = criMeta("", `{"container_port":80,"host_port":8080}`)
	if r, err := f.start(p); err != nil || r != Built {
		t.Fatalf("Ensure = %v, %v", r, err)
	}
}

func TestEventForApplicationContainerDoesNothing(t *testing.T) {
	f := newFixture(t)
	f.sandbox("app", "")
	f.store.sbs["app"].IsSandbox = false
	f.store.sbs["app"].Metadata = criMeta("7171:71", "")
	if err := f.startRetrying(Pod{ID: "app", Partial: true}); !errors.Is(err, ErrNotSandbox) {
		t.Fatalf("start of an application container = %v, want ErrNotSandbox", err)
	}
	if n := len(f.sim.State().Endpoints); n != 0 || f.sim.Calls()[hcnsim.OpCreateEndpoint] != 0 {
		t.Fatalf("%d endpoints for an application container", n)
	}
}

// Issue 10, item 8: the CNI (win-bridge honours portMappings) may have
// mapped the pod's hostPorts on its own endpoint in the pod's namespace;
// HNS refuses the same mapping twice, so those are skipped.
func TestMappingsTheCNIProvidesAreSkipped(t *testing.T) {
	tests := []struct {
		name      string
		sources   Inputs
		cniPorts  []uint16 // the CNI endpoint's host ports
		elsewhere bool     // the CNI endpoint is in another pod's namespace
		want      []uint16 // our endpoint's host ports; nil: no endpoint
		err       error
	}{
		{"some provided", Inputs{CRI: true}, []uint16{9001}, false, []uint16{9002}, nil},
		{"all provided: no endpoint", Inputs{CRI: true}, []uint16{9001, 9002}, false, nil, nil},
		{"none provided", Inputs{CRI: true}, []uint16{7000}, false, []uint16{9001, 9002}, nil},
		{"another namespace's mapping is a conflict", Inputs{CRI: true}, []uint16{9001}, true, nil, hcn.ErrPortInUse},
		{"annotations only: not looked for", Inputs{Annotations: true}, []uint16{9001}, false, nil, hcn.ErrPortInUse},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			f.core.opt.Inputs = tt.sources
			p := f.sandbox("s", "9001:80,9002:80")
			f.store.sbs["s"].Metadata = criMeta("9001:80,9002:80", criPorts(1, 2))
			ns := f.store.sbs["s"].NetNS
			if tt.elsewhere {
				ns = f.sim.CreateNamespace("")
			}
			bridge, err := f.sim.CreateNetwork(ctx, hcn.NetworkSpec{Name: "cbr0", Type: hcn.NetworkL2Bridge, Subnet: "10.244.0.0/24", Gateway: "10.244.0.1"})
			if err != nil {
				t.Fatal(err)
			}
			var pms []hcn.PortMappingPolicy
			for _, port := range tt.cniPorts {
				pms = append(pms, hcn.PortMappingPolicy{Protocol: hcn.TCP, ExternalPort: port, InternalPort: 80})
			}
			cni, err := f.sim.CreateEndpoint(ctx, hcn.EndpointSpec{Name: "cbr0_s", NetworkID: bridge.ID, PortMappings: pms})
			if err != nil {
				t.Fatal(err)
			}
			if err := f.sim.AddNamespaceEndpoint(ctx, ns, cni.ID); err != nil {
				t.Fatal(err)
			}
			_, err = f.start(p)
			if tt.err != nil {
				if !errors.Is(err, tt.err) {
					t.Fatalf("Ensure = %v, want %v", err, tt.err)
				}
			} else if err != nil {
				t.Fatalf("Ensure = %v", err)
			}
			eps := f.endpoints(p.ID)
			if tt.want == nil {
				if len(eps) != 0 {
					t.Fatalf("endpoints %+v, want none", eps)
				}
				return
			}
			var want []hcn.PortMappingPolicy
			for _, port := range tt.want {
				want = append(want, hcn.PortMappingPolicy{Protocol: hcn.TCP, ExternalPort: port, InternalPort: 80, Flags: 1})
			}
			if len(eps) != 1 || !hcn.SamePolicies(eps[0].PortMappings, want) {
				t.Fatalf("endpoints %+v, want one with %v", eps, want)
			}
		})
	}
}

func TestEachPodGetsWhatItAsksFor(t *testing.T) {
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

// The rolling update of a hostPort pod: the new pod asks for the port while
// the old one's stop is being worked on (HNS slow to delete). The new pod
// is not refused for good: it gets the port once the old endpoint is gone.
func TestPodGetsThePortOfAHolderThatIsStopping(t *testing.T) {
	f := newFixture(t)
	f.core.opt.Deadline = 5 * time.Second
	old := f.eventPod("old", "8080:80")
	if err := startedAndWait(t, f, old); err != nil {
		t.Fatal(err)
	}
	f.sim.SetOpLatency(hcnsim.OpDeleteEndpoint, 200*time.Millisecond)
	stopDone := f.exited(old.ID)
	next := f.sandbox("next", "8080:80")
	if err := f.core.StartPod(ctx, next); err != nil {
		t.Fatalf("the successor was refused: %v", err)
	}
	if err := waitResult(t, stopDone); err != nil {
		t.Fatal(err)
	}
	if eps := f.endpoints("next"); len(eps) != 1 || eps[0].Namespace == "" {
		t.Fatalf("successor: %+v", eps)
	}
	if eps := f.endpoints("old"); len(eps) != 0 {
		t.Fatalf("old: %+v", eps)
	}
}

// A pod whose HNS create failed for good gives its host ports back at once:
// the next pod asking for them is not refused.
func TestFinalCreateFailureGivesThePortsBack(t *testing.T) {
	f := newFixture(t)
	if err := f.sim.InjectFault(hcnsim.Fault{Op: hcnsim.OpCreateEndpoint, Kind: "invalid", Count: 1}); err != nil {
		t.Fatal(err)
	}
	a := f.sandbox("a", "8080:80")
	if err := f.core.StartPod(ctx, a); err == nil {
		t.Fatal("StartPod succeeded through a refused create")
	}
	b := f.sandbox("b", "8080:80")
	if err := f.core.StartPod(ctx, b); err != nil {
		t.Fatalf("the next pod was refused the port of a pod that never got it: %v", err)
	}
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
		{"plain", "plain", "8092:80", true}, // unlabelled: the default level, baseline (unknown grants nothing)
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
	if n := f.sim.Calls()[hcnsim.OpCreateEndpoint]; n != 1 {
		t.Errorf("HNS asked to create %d endpoints, want 1 (the refused pods' never)", n)
	}
	// counted as failing while they run, and no longer once stopped
	if got := f.core.Failing(); got[ReasonPodSecurity] != 3 || len(got) != 1 {
		t.Errorf("failing %v, want the 3 refused pods under %s", got, ReasonPodSecurity)
	}
	if _, err := f.stop(f.podIn("team", "team", "8090:80")); err != nil {
		t.Fatal(err)
	}
	if got := f.core.Failing(); got[ReasonPodSecurity] != 2 {
		t.Errorf("failing %v after one refused pod stopped, want 2", got)
	}
	// the operator says the cluster's default is privileged: an
	// unlabelled namespace's next pod is mapped
	def := testAdmission()
	def.PodSecurityDefaultLevel = config.LevelPrivileged
	pol, err := admission.Compile(def)
	if err != nil {
		t.Fatal(err)
	}
	f.core.SetAdmission(pol)
	if _, err := f.start(f.podIn("plain-2", "plain", "8095:80")); err != nil || len(f.endpoints("plain-2")) != 1 {
		t.Errorf("unlabelled with pod_security_default_level = privileged: %v, %d endpoints; want mapped", err, len(f.endpoints("plain-2")))
	}
	f.core.SetAdmission(f.core.opt.Admission)
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

// Step 0 of a sync: what a listing of HNS showed is what a sandbox known to
// nobody holds (its ports join the index); for a sandbox the state knows,
// a listing that agrees changes nothing and one that disagrees makes the
// next sync ask HNS. A listing alone decides nothing and does no I/O.
func TestListingIsLearnedOrDoubted(t *testing.T) {
	f := newFixture(t)
	f.store.failSandbox = errors.New("containerd must not be asked")
	mk := func(id string, port uint16) []hcn.Endpoint {
		return []hcn.Endpoint{{ID: "E" + id, Name: f.core.mgr.EndpointName(id), PortMappings: []hcn.PortMappingPolicy{pp(hcn.TCP, port, "", 1)}}}
	}
	hold(f.core.st, "known", "ns/known", mk("known", 9000)[0].PortMappings)
	hold(f.core.st, "agrees", "ns/agrees", mk("agrees", 9001)[0].PortMappings)
	for id, eps := range map[string][]hcn.Endpoint{"new": mk("new", 9002), "known": mk("known", 9100), "agrees": mk("agrees", 9001)} {
		f.core.st.trigger(id, sighting{learn: true, listing: true, listed: eps})
		sn, _ := f.core.st.snapshot(id, 1)
		o := f.core.sync(ctx, sn, f.core.inputs())
		if o.err != nil || o.change != NoChange {
			t.Fatalf("%s: %v, %v: a listing alone decided something", id, o.change, o.err)
		}
		f.core.st.commit(id, sn, o.known, false)
		switch id {
		case "new":
			if !o.known.epsKnown || !sameEndpoints(o.known.eps, eps) || !hcn.SamePolicies(o.known.ports, eps[0].PortMappings) {
				t.Errorf("new: %+v, want the listing adopted", o.known)
			}
		case "known":
			if o.known.epsKnown {
				t.Errorf("known: %+v, want HNS asked next time (the listing disagrees)", o.known)
			}
		case "agrees":
			if !o.known.epsKnown || o.known.eps[0].ID != "Eagrees" {
				t.Errorf("agrees: %+v, want what was known kept", o.known)
			}
		}
	}
	if err := f.core.st.claim("x", "", mk("x", 9002)[0].PortMappings); err == nil || !strings.Contains(err.Error(), "sandbox new") {
		t.Fatalf("the adopted port: %v", err)
	}
	if err := f.core.st.claim("x", "", mk("x", 9000)[0].PortMappings); err == nil {
		t.Fatal("a port held by a sandbox whose listing disagrees was given away before HNS was asked")
	}
}

// 10: after a restart, the orphan of a pod stopped while the plugin was down
// held its host port until the background reconcile removed it: a new pod
// asking for that port in the meantime was refused.
func TestNewPodReclaimsThePortOfAnOrphan(t *testing.T) {
	f := newFixture(t)
	old := f.sandbox("old", "8080:80")
	if _, err := f.start(old); err != nil {
		t.Fatal(err)
	}
	// the plugin restarts; meanwhile the old pod stopped
	f.core.Close()
	f.store.mu.Lock()
	f.store.tasks["old"] = TaskStopped
	f.store.mu.Unlock()
	restarted := NewCore(f.core.mgr, f.store, f.core.opt, f.core.log)
	t.Cleanup((&fixture{core: restarted}).closeAndWait(t))
	if err := restarted.LoadPorts(ctx); err != nil { // what start-up does, before any reconcile
		t.Fatal(err)
	}
	f.core = restarted
	next := f.sandbox("next", "8080:80")
	if err := f.core.StartPod(ctx, next); err != nil {
		t.Fatalf("new pod refused: %v", err)
	}
	if eps := f.endpoints("old"); len(eps) != 0 {
		t.Fatalf("orphan kept: %+v", eps)
	}
	if eps := f.endpoints("next"); len(eps) != 1 || eps[0].Namespace == "" {
		t.Fatalf("new pod has %+v", eps)
	}
	// a running holder keeps its port
	third := f.sandbox("third", "8080:80")
	if err := f.core.StartPod(ctx, third); !errors.Is(err, ErrPortConflict) {
		t.Fatalf("StartPod(third) = %v, want a conflict with the running pod", err)
	}
}

// A host port released on removal is free for the next pod.
func TestRemovedPodsPortGoesToTheNextPod(t *testing.T) {
	f := newFixture(t)
	a, b := f.sandbox("a", "8080:80"), f.sandbox("b", "8080:80")
	if err := f.core.StartPod(ctx, a); err != nil {
		t.Fatal(err)
	}
	if err := f.core.StartPod(ctx, b); !errors.Is(err, ErrPortConflict) {
		t.Fatalf("b while a holds the port: %v", err)
	}
	f.core.StopPod(context.Background(), a)
	if err := f.core.StartPod(ctx, b); err != nil {
		t.Fatalf("b after a stopped: %v", err)
	}
	if eps := f.endpoints("b"); len(eps) != 1 || !hcn.SamePolicies(eps[0].PortMappings, []hcn.PortMappingPolicy{{Protocol: hcn.TCP, ExternalPort: 8080, InternalPort: 80, Flags: 1}}) {
		t.Fatalf("b has %+v", eps)
	}
}

// Issue 10, item 2: a Hyper-V isolated pod's utility VM takes the
// namespace's endpoints only when it starts; an endpoint added by us would
// never reach it, so the pod is refused with an error that says so.
func TestHyperVPodsAreRefused(t *testing.T) {
	tests := []struct {
		name     string
		handlers []string // nil: the configured default
		hyperV   string   // SandboxInfo.HyperV
		handler  string   // the NRI pod's runtime handler
		criMeta  string   // partial pod: runtime handler in the CRI record
		mapping  string
		refused  string // "" when the pod gets its endpoint
	}{
		{"container record says Hyper-V", nil, "runhcs runtime options: SandboxIsolation HYPERVISOR", "", "", "8080:80", "SandboxIsolation HYPERVISOR"},
		{"default Hyper-V runtime handler", nil, "", "runhcs-wcow-hypervisor", "", "8080:80", "runtime handler runhcs-wcow-hypervisor"},
		{"handler from the CRI record of a partial pod", nil, "", "", "runhcs-wcow-hypervisor", "8080:80", "runtime handler runhcs-wcow-hypervisor"},
		{"process-isolated handler", nil, "", "runhcs-wcow-process", "", "8080:80", ""},
		{"configured handlers replace the default", []string{"wcow-vm"}, "", "wcow-vm", "", "8080:80", "runtime handler wcow-vm"},
		{"default no longer listed", []string{"wcow-vm"}, "", "runhcs-wcow-hypervisor", "", "8080:80", ""},
		{"Hyper-V pod without host ports: nothing to refuse", nil, "SandboxIsolation HYPERVISOR", "", "", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			f.core.opt.HyperVHandlers = []string{"runhcs-wcow-hypervisor"} // config.Default's
			if tt.handlers != nil {
				f.core.opt.HyperVHandlers = tt.handlers
			}
			p := f.sandbox("hv", tt.mapping)
			p.RuntimeHandler = tt.handler
			f.store.sbs["hv"].HyperV = tt.hyperV
			if tt.criMeta != "" {
				f.store.sbs["hv"].Metadata = []byte(`{"Version":"v1","Metadata":{"ID":"hv","Name":"p_ns_uid_0","RuntimeHandler":"` + tt.criMeta +
					`","Config":{"metadata":{"name":"p","uid":"uid","namespace":"ns"},"annotations":{"` +
					request.AnnotationPortMappings + `":"` + tt.mapping + `"}}}}`)
				p = Pod{ID: "hv", Partial: true}
			}
			err := f.core.StartPod(ctx, p)
			if tt.refused == "" {
				if err != nil {
					t.Fatalf("StartPod = %v, want no error", err)
				}
				if want := min(len(tt.mapping), 1); len(f.endpoints("hv")) != want {
					t.Fatalf("endpoints %+v, want %d", f.endpoints("hv"), want)
				}
				return
			}
			if !errors.Is(err, ErrHyperV) || !errors.Is(err, ErrInvalidPod) {
				t.Fatalf("StartPod = %v, want ErrHyperV", err)
			}
			if msg := err.Error(); !strings.Contains(msg, tt.refused) || !strings.Contains(msg, "portMappings") || !strings.Contains(msg, "pod ") {
				t.Errorf("error %q does not name the pod, %q and the way out", msg, tt.refused)
			}
			if n := f.sim.Calls()[hcnsim.OpCreateEndpoint]; n != 0 || len(f.sim.State().Endpoints) != 0 {
				t.Errorf("HNS asked to create %d endpoints for a Hyper-V pod", n)
			}
		})
	}
}

// A conflict whose holder is gone but whose ports could not be freed at
// once (HNS refused the delete) is not taken for a conflict: the start is
// retried and takes the port.
func TestConflictWithAHolderThatCannotBeFreedYetIsRetried(t *testing.T) {
	f := newFixture(t)
	f.core.opt.Deadline = 5 * time.Second
	gone := f.sandbox("gone", "8080:80")
	if err := f.core.StartPod(ctx, gone); err != nil {
		t.Fatal(err)
	}
	f.store.mu.Lock()
	delete(f.store.sbs, "gone") // vanished without a stop event
	f.store.mu.Unlock()
	_ = f.sim.InjectFault(hcnsim.Fault{Op: hcnsim.OpDeleteEndpoint, Kind: "in-use", Count: 1})
	next := f.sandbox("next", "8080:80")
	if err := f.core.StartPod(ctx, next); err != nil {
		t.Fatalf("StartPod: %v, want the port once the vanished holder's endpoint is deleted", err)
	}
	if eps := f.endpoints("next"); len(eps) != 1 || eps[0].Namespace == "" {
		t.Fatalf("next: %+v", eps)
	}
	if eps := f.endpoints("gone"); len(eps) != 0 {
		t.Fatalf("the vanished holder keeps %+v", eps)
	}
}

// A start that turns out to get no endpoint (what containerd says of the
// sandbox, a stop meanwhile, HNS refusing) leaves nothing in HNS and gives
// its host port back: the next pod asking for it gets it.
func TestStartWithoutAnEndpointLeavesThePortFree(t *testing.T) {
	for _, tc := range []struct {
		name    string
		arrange func(f *fixture, p Pod)
		wantErr error // nil: the pod starts, skipped
	}{
		{"no Windows namespace", func(f *fixture, p Pod) { f.store.sbs[p.ID].NetNS = "" }, nil},
		{"Hyper-V isolated", func(f *fixture, p Pod) { f.store.sbs[p.ID].HyperV = "OCI spec: Windows.HyperV is set" }, ErrHyperV},
		{"sandbox not in containerd", func(f *fixture, p Pod) { delete(f.store.sbs, p.ID) }, ErrSandboxNotFound},
		{"stopped while containerd is asked", func(f *fixture, p Pod) {
			f.store.onSandbox = func(id string) { f.exited(id) }
		}, nil},
		{"attach refused", func(f *fixture, _ Pod) {
			_ = f.sim.InjectFault(hcnsim.Fault{Op: hcnsim.OpAddNamespaceEndpoint, Kind: "invalid", Count: 1})
		}, hcn.ErrInvalid},
		{"create refused", func(f *fixture, _ Pod) {
			_ = f.sim.InjectFault(hcnsim.Fault{Op: hcnsim.OpCreateEndpoint, Kind: "invalid", Count: 1})
		}, hcn.ErrInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := loaded(t)
			p := f.sandbox("p", "8080:80")
			tc.arrange(f, p)
			err := f.core.StartPod(ctx, p)
			switch {
			case tc.wantErr == nil && err != nil:
				t.Fatalf("StartPod: %v, want the pod started without an endpoint", err)
			case tc.wantErr != nil && !errors.Is(err, tc.wantErr):
				t.Fatalf("StartPod: %v, want %v", err, tc.wantErr)
			}
			f.store.hookSandbox(nil)
			eventually(t, "nothing of p left in HNS", func() bool { return len(f.endpoints("p")) == 0 })
			// the host port is free: another pod takes it
			q := f.sandbox("q", "8080:80")
			if err := f.core.StartPod(ctx, q); err != nil {
				t.Fatalf("the next pod asking for the port: %v", err)
			}
		})
	}
}

// An old endpoint of ours with other mappings (left by a crash) is replaced
// by the start, not joined by a second one, and containerd is asked once.
func TestStartReplacesAnOldEndpointOfOurs(t *testing.T) {
	f := newFixture(t) // no listing taken: HNS is asked what the sandbox has
	f.core.opt.Deadline = 5 * time.Second
	p := f.sandbox("a", "8080:80")
	netID, err := f.core.mgr.EnsureNetwork(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.sim.AddStaleEndpoint(hcn.EndpointSpec{Name: f.core.mgr.EndpointName("a"), NetworkID: netID,
		PortMappings: []hcn.PortMappingPolicy{{InternalPort: 80, ExternalPort: 9999, Protocol: 6}}}, ""); err != nil {
		t.Fatal(err)
	}
	lookups := 0
	f.store.onSandbox = func(string) { lookups++ }
	if err := f.core.StartPod(ctx, p); err != nil {
		t.Fatal(err)
	}
	eps := f.endpoints("a")
	if len(eps) != 1 || eps[0].PortMappings[0].ExternalPort != 8080 || eps[0].Namespace == "" {
		t.Fatalf("endpoints: %+v", eps)
	}
	if lookups != 1 {
		t.Fatalf("containerd asked %d times for the sandbox, want once", lookups)
	}
	if n := f.core.Endpoints(); n != 1 {
		t.Fatalf("the state knows %d sandboxes with endpoints, want 1", n)
	}
}

// With the listing taken at start-up, the state knows what the plugin's
// sandboxes have: a start costs create and attach, a stop detach and
// delete, and a sandbox that never had an endpoint costs no HNS call at all.
func TestKnownEndpointsSaveHNSCalls(t *testing.T) {
	f := loaded(t)
	warm := f.sandbox("warm", "8081:80")
	if err := f.core.StartPod(ctx, warm); err != nil { // creates the network
		t.Fatal(err)
	}
	before := f.sim.Calls()
	p := f.sandbox("sb1", "8080:80")
	if err := f.core.StartPod(ctx, p); err != nil {
		t.Fatal(err)
	}
	f.core.StopPod(ctx, p)
	f.core.StopPod(ctx, f.sandbox("never-mapped", ""))
	after := f.sim.Calls()
	total := 0
	for op, n := range after {
		total += n - before[op]
	}
	if total != 4 || after[hcnsim.OpListEndpointsByName] != before[hcnsim.OpListEndpointsByName] {
		t.Errorf("%d HNS calls (%v -> %v), want 4 (create, attach, detach, delete) and no listing", total, before, after)
	}
}

// What HNS holds, not the state, decides: an endpoint deleted behind the
// plugin's back is noticed by the resync's listing and built again; after a
// failed operation HNS is asked again.
func TestKnownEndpointsRecheckedAfterExternalChange(t *testing.T) {
	f := loaded(t)
	p := f.sandbox("sb1", "8080:80")
	if err := f.core.StartPod(ctx, p); err != nil {
		t.Fatal(err)
	}
	ep := f.endpoints("sb1")[0]
	if err := f.sim.RemoveNamespaceEndpoint(ctx, ep.Namespace, ep.ID); err != nil { // an operator, behind our back
		t.Fatal(err)
	}
	if err := f.sim.DeleteEndpoint(ctx, ep.ID); err != nil {
		t.Fatal(err)
	}
	if sum, err := f.core.ReconcileAll(ctx); err != nil || sum.Created != 1 {
		t.Fatalf("resync = %+v, %v; want the endpoint built again", sum, err)
	}
	_ = f.sim.InjectFault(hcnsim.Fault{Op: hcnsim.OpRemoveNamespaceEndpoint, Kind: "internal"})
	before := f.sim.Calls()[hcnsim.OpListEndpointsByName]
	f.core.StopPod(ctx, p) // fails once, then the retry asks HNS what is there
	eventually(t, "the endpoint removed", func() bool { return len(f.endpoints("sb1")) == 0 })
	if f.sim.Calls()[hcnsim.OpListEndpointsByName] != before+1 {
		t.Error("after a failure the next attempt did not ask HNS")
	}
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

// A pod refused a port whose holder was running is not refused again
// from that old confirmation once the holder vanished unseen (no event):
// its next sync asks the holder's own sync again, which finds it gone
// and gives the port back.
func TestAPortWhoseHolderVanishedUnseenGoesToTheNextAsker(t *testing.T) {
	f := newFixture(t)
	a, b := f.namedPod("a", "shop", "8080:80", ""), f.namedPod("b", "shop", "8080:80", "")
	if err := startedAndWait(t, f, a); err != nil {
		t.Fatal(err)
	}
	if err := startedAndWait(t, f, b); !errors.Is(err, ErrPortConflict) {
		t.Fatalf("b while a runs: %v, want a conflict", err)
	}
	// a vanishes while nobody listens: containerd forgets it, its
	// namespace and endpoint go
	f.store.mu.Lock()
	ns := f.store.sbs["a"].NetNS
	delete(f.store.sbs, "a")
	f.store.mu.Unlock()
	for _, ep := range f.endpoints("a") {
		if err := f.sim.RemoveNamespaceEndpoint(ctx, ns, ep.ID); err != nil {
			t.Fatal(err)
		}
		if err := f.sim.DeleteEndpoint(ctx, ep.ID); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.sim.DeleteNamespace(ns); err != nil {
		t.Fatal(err)
	}
	if err := startedAndWait(t, f, b); err != nil || len(f.endpoints("b")) != 1 {
		t.Fatalf("b's next start: %v, endpoints %+v; want the port of the vanished holder", err, f.endpoints("b"))
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
					pol, err := admission.Compile(testAdmission())
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

// The pod's own DNS (its CRI record's servers, search list and options,
// with its first search domain as the suffix) is what its endpoint
// carries, so HNS fills in nothing of the node's; a pod whose record has
// no DNS gets the DNS of the CNI's endpoint in its namespace (issue 38),
// and with no such endpoint, what HNS fills in. Under both fill-in rules.
func TestThePodsOwnDNSIsOnItsEndpoint(t *testing.T) {
	podDNS := hcn.DNS{Domain: "ns.svc.cluster.local", Search: []string{"ns.svc.cluster.local"}, ServerList: []string{"10.96.0.10"}}
	cniDNS := hcn.DNS{Domain: "cni.example", Search: []string{"default.svc.cluster.local", "svc.cluster.local"}, ServerList: []string{"10.96.0.11", "10.96.0.12"}}
	for _, rules := range []hcnsim.Rules{{}, {NoDNSFill: true}} {
		for _, tc := range []struct {
			name      string
			recordDNS bool
			cni       *hcn.DNS // the CNI's endpoint in the namespace, with this DNS
			want      hcn.DNS  // zero: what HNS fills in
		}{
			{"the record's", true, &cniDNS, podDNS},
			{"no DNS in the record: the CNI endpoint's", false, &cniDNS, cniDNS},
			{"no DNS in the record, a CNI endpoint without any: HNS's", false, &hcn.DNS{}, hcn.DNS{}},
			{"no DNS in the record, no CNI endpoint: HNS's", false, nil, hcn.DNS{}},
		} {
			t.Run(rules.String()+"/"+tc.name, func(t *testing.T) {
				f := newFixture(t)
				f.sim.SetRules(rules)
				f.sandbox("p", "8080:80")
				f.store.sbs["p"].Metadata = criMetaWith("8080:80", "", map[bool]string{true: "10.96.0.10"}[tc.recordDNS])
				if tc.cni != nil {
					cbr, err := f.sim.CreateNetwork(ctx, hcn.NetworkSpec{Name: "cbr0", Type: hcn.NetworkL2Bridge, Subnet: "10.244.0.0/16"})
					if err != nil {
						t.Fatal(err)
					}
					ep, err := f.sim.CreateEndpoint(ctx, hcn.EndpointSpec{Name: "cni-p", NetworkID: cbr.ID, DNS: *tc.cni})
					if err == nil {
						err = f.sim.AddNamespaceEndpoint(ctx, f.store.sbs["p"].NetNS, ep.ID)
					}
					if err != nil {
						t.Fatal(err)
					}
				}
				if err := startedAndWait(t, f, Pod{ID: "p"}); err != nil {
					t.Fatal(err)
				}
				eps := f.endpoints("p")
				if len(eps) != 1 {
					t.Fatalf("endpoints %+v", eps)
				}
				want := tc.want
				if want.IsZero() && !rules.NoDNSFill {
					want = hcn.DNS{ServerList: hcnsim.HostDNS().ServerList, Domain: hcnsim.HostDNS().Domain}
				}
				if got := eps[0].DNS; !reflect.DeepEqual(got, want) {
					t.Fatalf("the endpoint carries DNS %+v, want %+v", got, want)
				}
				if m := f.core.Mappings(); len(m) != 1 || m[0].ForeignDNS || f.core.ForeignDNS() != 0 {
					t.Fatalf("mappings %+v: an endpoint built now reported as carrying DNS other than the pod's", m)
				}
			})
		}
	}
}

// Issue 38: an upgrade drops no running pod's host port to fix its DNS.
// Endpoints as earlier releases built them (no DNS sent, so HNS filled in
// the node's; or the pod's resolvers without its suffix, so HNS filled in
// the node's suffix) are adopted by the new release's first resync, not
// rebuilt, and reported (Mappings names them, the gauge counts them); a
// pod started after the upgrade carries its own DNS and is not reported.
func TestAnUpgradeKeepsEndpointsWhoseDNSAloneDiffersAndReportsThem(t *testing.T) {
	for _, rules := range []hcnsim.Rules{{}, {NoDNSFill: true}} {
		t.Run(rules.String(), func(t *testing.T) {
			f := newFixture(t)
			f.sim.SetRules(rules)
			// the earlier releases' endpoints, built by the manager as they
			// built them
			old := hcn.NewManager(f.sim, testManagerConfig())
			shapes := map[string]hcn.DNS{"none": {}, "no-suffix": {ServerList: []string{"10.96.0.10"}, Search: []string{"ns.svc.cluster.local"}}}
			ids := map[string]string{}
			for name, dns := range shapes {
				port := map[string]string{"none": "8081:80", "no-suffix": "8082:80"}[name]
				f.sandbox(name, port)
				f.store.sbs[name].Metadata = criMetaDNS(port, "10.96.0.10")
				ep, _, err := old.Ensure(ctx, hcn.Desired{SandboxID: name, Namespace: f.store.sbs[name].NetNS,
					Policies: request.BuildPolicies(mustParse(t, port), f.core.opt.Policy), DNS: dns})
				if err != nil {
					t.Fatal(err)
				}
				ids[name] = ep.ID
			}
			// the new release starts: it lists HNS and resyncs
			if err := f.core.LoadPorts(ctx); err != nil {
				t.Fatal(err)
			}
			for range 2 {
				if sum, err := f.core.ReconcileAll(ctx); err != nil || sum.Created != 0 || sum.Deleted != 0 {
					t.Fatalf("resync after the upgrade = %+v, %v: want nothing rebuilt", sum, err)
				}
			}
			for name, id := range ids {
				if eps := f.endpoints(name); len(eps) != 1 || eps[0].ID != id || eps[0].Namespace == "" {
					t.Fatalf("%s: %+v after the upgrade, want %s kept attached", name, eps, id)
				}
			}
			m := f.core.Mappings()
			if len(m) != 2 || !m[0].ForeignDNS || !m[1].ForeignDNS || f.core.ForeignDNS() != 2 {
				t.Fatalf("mappings %+v, %d counted: want both endpoints reported as carrying DNS other than the pod's", m, f.core.ForeignDNS())
			}
			// a pod started after the upgrade carries its own DNS
			f.sandbox("new", "8083:80")
			f.store.sbs["new"].Metadata = criMetaDNS("8083:80", "10.96.0.10")
			if err := startedAndWait(t, f, Pod{ID: "new"}); err != nil {
				t.Fatal(err)
			}
			if eps := f.endpoints("new"); len(eps) != 1 || eps[0].DNS.Domain != "ns.svc.cluster.local" || f.core.ForeignDNS() != 2 {
				t.Fatalf("the new pod's endpoint %+v, %d reported: want its own DNS, not reported", eps, f.core.ForeignDNS())
			}
		})
	}
}

// cost is what one operation asked: HNS's calls (the simulator's names)
// and containerd's reads ("containerd.Sandbox", ...), each counted.
type cost map[string]int

// since is what was asked after before.
func (c cost) since(before cost) cost {
	out := cost{}
	for k, n := range c {
		if d := n - before[k]; d > 0 {
			out[k] = d
		}
	}
	return out
}

// costs is everything asked so far of HNS and containerd.
func (f *fixture) costs() cost {
	out := cost(f.sim.Calls())
	for k, n := range f.store.calls() {
		out[k] = n
	}
	return out
}

// diff says, call by call, what got asks beyond want or lacks of it.
func (c cost) diff(want cost) string {
	keys := map[string]bool{}
	for k := range c {
		keys[k] = true
	}
	for k := range want {
		keys[k] = true
	}
	var out []string
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		switch got, w := c[k], want[k]; {
		case got > w:
			out = append(out, fmt.Sprintf("%d extra %s (%d, want %d)", got-w, k, got, w))
		case got < w:
			out = append(out, fmt.Sprintf("%d fewer %s (%d, want %d)", w-got, k, got, w))
		}
	}
	return strings.Join(out, "; ")
}

// Issue 45: a start, a stop and a resync cost only the calls they need,
// counted, not timed: per pod shape and per path (the runtime's NRI
// requests, and containerd's events with the periodic resync), every call
// to HNS and every read of containerd against the table of what the shape
// needs; a call more names itself. What each needs:
//   - a start reads the record once (the request, the namespace, the DNS);
//     an endpoint is created and attached; HNS is asked for the pod's
//     namespace only for hostPorts (the CNI may map them) or a record
//     with no DNS at all (the CNI endpoint's is what the pod has);
//   - a stop removes what it knows is there: detach, delete; nothing read;
//   - a resync lists (containerd's sandboxes on the events path, HNS's
//     endpoints of ours) and, for a pod with host ports, reads its record
//     and task and asks whether its namespace still exists; a pod that
//     asks nothing needs neither.
func TestEachStartStopAndResyncCostsOnlyWhatItNeeds(t *testing.T) {
	const (
		sb, task, list     = "containerd.Sandbox", "containerd.TaskState", "containerd.ListSandboxes"
		create, attach, ns = hcnsim.OpCreateEndpoint, hcnsim.OpAddNamespaceEndpoint, hcnsim.OpGetNamespace
		detach, del, get   = hcnsim.OpRemoveNamespaceEndpoint, hcnsim.OpDeleteEndpoint, hcnsim.OpGetEndpoint
		opened, byNet      = hcnsim.OpenedEndpoint, hcnsim.OpListEndpointsOfNetwork
	)
	cniResult := `,"CNIResult":{"Interfaces":null,"DNS":[{},{"nameservers":["10.22.0.2"],"search":["cni.example"]}],"Routes":null}`
	record := func(annotation, ports, server, outside string) []byte {
		ann, dns := "", ""
		if annotation != "" {
			ann = `,"annotations":{"` + request.AnnotationPortMappings + `":"` + annotation + `"}`
		}
		if server != "" {
			dns = `,"dns_config":{"servers":["` + server + `"],"searches":["ns.svc.cluster.local"]}`
		}
		return []byte(`{"Version":"v1","Metadata":{"ID":"p","Name":"p_ns_uid_0","Config":{"metadata":{"name":"p","uid":"uid","namespace":"ns"},` +
			`"port_mappings":[` + ports + `]` + dns + ann + `}` + outside + `}}`)
	}
	hostPort := `{"container_port":80,"host_port":9011}`
	mapped := cost{create: 1, attach: 1}
	asksNS := cost{create: 1, attach: 1, ns: 1, get: 1, opened: 1} // the CNI's endpoint opened
	stop := cost{detach: 1, del: 1}
	// a resync of a mapped pod: its record, its task, its namespace, and
	// its endpoint opened by the listing of ours
	live := cost{sb: 1, task: 1, ns: 1, opened: 1}
	for _, tc := range []struct {
		name          string
		annotation    string
		meta          []byte
		start, resync cost // beyond the listings
		stop          cost
	}{
		{"annotation, its DNS", "9010:80", record("9010:80", "", "10.96.0.10", ""), mapped, live, stop},
		{"hostPort", "", record("", hostPort, "10.96.0.10", ""), asksNS, live.plus(cost{ns: 1, get: 1, opened: 1}), stop},
		{"annotation, no DNS config, the CNI's in the record", "9010:80", record("9010:80", "", "", cniResult), mapped, live, stop},
		{"annotation, no DNS anywhere in the record", "9010:80", record("9010:80", "", "", ""), asksNS, live.plus(cost{ns: 1, get: 1, opened: 1}), stop},
		{"a pod that asks nothing", "", record("", "", "10.96.0.10", ""), cost{}, cost{sb: 1}, cost{}},
	} {
		for _, path := range []string{"nri", "events", "nri, NetworkPolicy checked", "events, NetworkPolicy checked"} {
			t.Run(tc.name+"/"+path, func(t *testing.T) {
				f := newFixture(t)
				if checked := strings.HasSuffix(path, "checked"); checked { // issue 52: policies that select other pods cost nothing
					var ps *policies
					f, ps, _ = policyFixture(t)
					ps.by["ns"] = []admission.NetworkPolicy{{Namespace: "ns", Name: "db", Selector: labels.SelectorFromSet(labels.Set{"app": "db"}), Ingress: true}}
					ps.publish(time.Now())
					path, _, _ = strings.Cut(path, ",")
				}
				f.core.opt.Inputs = Inputs{Annotations: true, CRI: true}
				if _, err := f.core.mgr.EnsureNetwork(ctx); err != nil {
					t.Fatal(err)
				}
				if err := f.core.LoadPorts(ctx); err != nil {
					t.Fatal(err)
				}
				p := f.sandbox("p", tc.annotation)
				f.store.sbs["p"].Metadata = tc.meta
				// the CNI's endpoint in the pod's namespace, mapping nothing
				cni, err := f.sim.CreateNetwork(ctx, hcn.NetworkSpec{Name: "cbr0", Type: hcn.NetworkL2Bridge, Subnet: "10.244.0.0/16"})
				if err != nil {
					t.Fatal(err)
				}
				ep, err := f.sim.CreateEndpoint(ctx, hcn.EndpointSpec{Name: "cni-p", NetworkID: cni.ID})
				if err == nil {
					err = f.sim.AddNamespaceEndpoint(ctx, f.store.sbs["p"].NetNS, ep.ID)
				}
				if err != nil {
					t.Fatal(err)
				}
				check := func(what string, want cost, do func() error) {
					t.Helper()
					before := f.costs()
					if err := do(); err != nil {
						t.Fatalf("%s: %v", what, err)
					}
					if d := f.costs().since(before).diff(want); d != "" {
						t.Errorf("%s asks more or less than it needs: %s", what, d)
					}
				}
				check("the start", cost(maps.Clone(map[string]int(tc.start))).plus(cost{sb: 1}), func() error {
					if path == "nri" {
						return f.core.StartPod(ctx, p)
					}
					return waitResult(t, f.started("p"))
				})
				if want := len(tc.start) > 0; (len(f.endpoints("p")) == 1) != want {
					t.Fatalf("endpoints %+v after the start, want mapped %v", f.endpoints("p"), want)
				}
				resync := tc.resync.plus(cost{byNet: 1}) // the listing of our endpoints
				check("a resync", resync.plus(map[bool]cost{true: {list: 1}, false: {}}[path == "events"]), func() error {
					var err error
					if path == "nri" {
						_, err = f.core.Reconcile(ctx, []Pod{p})
					} else {
						_, err = f.core.ReconcileAll(ctx)
					}
					return err
				})
				check("the stop", tc.stop, func() error {
					if path == "nri" {
						f.core.StopPod(ctx, p)
						return nil
					}
					// a container that holds nothing is forgotten: its exit is
					// an application container's to the plugin (quiet)
					if err := waitResult(t, f.exited("p")); err != nil && !(len(tc.start) == 0 && errors.Is(err, ErrNotSandbox)) {
						return err
					}
					return nil
				})
			})
		}
	}
}

// plus is c with more calls.
func (c cost) plus(more cost) cost {
	out := maps.Clone(c)
	if out == nil {
		out = cost{}
	}
	for k, n := range more {
		out[k] += n
	}
	return out
}

// A create HNS may still have made (a call given up on finishes late) keeps
// the ports it asked held: another pod asking one of them waits for this
// sandbox's own sync instead of being told HNS holds the port for nobody
// (the chaos test's false conflict, seen with containerd 1.7), and gets it
// once the sandbox stops and its late endpoint is removed.
func TestACreateGivenUpOnKeepsItsPortsHeld(t *testing.T) {
	f := newFixture(t)
	a := f.sandbox("a", "9500:80")
	b := f.sandbox("b", "9500:80")
	if _, err := f.core.Reconcile(ctx, nil); err != nil { // HNS listed: a new sandbox has nothing there
		t.Fatal(err)
	}
	for _, fault := range []hcnsim.Fault{
		{Op: hcnsim.OpCreateEndpoint, Kind: "timeout", Count: 1, After: true},   // made, its answer lost
		{Op: hcnsim.OpListEndpointsByName, Kind: "unavailable", Count: 1 << 20}, // a's retries cannot look
	} {
		if err := f.sim.InjectFault(fault); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := f.start(a); !errors.Is(err, hcn.ErrTimeout) {
		t.Fatalf("a's start: %v, want HNS given up on", err)
	}
	if n := len(f.sim.State().Endpoints); n != 1 {
		t.Fatalf("%d endpoints in HNS, want a's, made late", n)
	}
	_, err := f.start(b)
	if !errors.Is(err, errHolderPending) || errors.Is(err, hcn.ErrPortInUse) {
		t.Fatalf("b's start: %v, want it to wait for a, the port's holder, not HNS's port-in-use", err)
	}
	f.sim.ClearFaults()
	if _, err := f.stop(a); err != nil {
		t.Fatalf("a's stop: %v", err)
	}
	eventually(t, "b gets the port once a's late endpoint is gone", func() bool {
		eps := f.sim.State().Endpoints
		return len(eps) == 1 && eps[0].Name == f.core.mgr.EndpointName("b") && eps[0].Namespace != ""
	})
}

// The ports a create given up on keeps held are held, not admitted: a
// policy that denies one by the sandbox's next sync refuses it there,
// though HNS made the endpoint late.
func TestPortsHeldForACreateGivenUpOnAreAdmittedAgain(t *testing.T) {
	f := newFixture(t)
	a := f.sandbox("a", "9500:80")
	if _, err := f.core.Reconcile(ctx, nil); err != nil {
		t.Fatal(err)
	}
	for _, fault := range []hcnsim.Fault{
		{Op: hcnsim.OpCreateEndpoint, Kind: "timeout", Count: 1, After: true},
		{Op: hcnsim.OpListEndpointsByName, Kind: "unavailable", Count: 1 << 20},
	} {
		if err := f.sim.InjectFault(fault); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := f.start(a); !errors.Is(err, hcn.ErrTimeout) {
		t.Fatalf("a's start: %v, want HNS given up on", err)
	}
	deny := testAdmission()
	deny.Deny = append(deny.Deny, "9500")
	pol, err := admission.Compile(deny)
	if err != nil {
		t.Fatal(err)
	}
	f.core.SetAdmission(pol)
	f.sim.ClearFaults()
	eventually(t, "a's next sync refuses 9500", func() bool { return errors.Is(f.core.st.lastErr("a"), admission.ErrDenied) })
	for range 20 { // and it is never attached
		for _, ep := range f.sim.State().Endpoints {
			if ep.Namespace != "" {
				t.Fatalf("endpoint %s attached with %v: a port the policy denies", ep.Name, ep.PortMappings)
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Issue 51, late effects: a pod whose create was given up on (HNS made
// the endpoint, its answer lost) and whose next sync is refused keeps
// nothing: the endpoint HNS made late is found by name and deleted, and
// the ports it asked go back. (It kept the endpoint, unattached, holding
// the port, until the pod stopped.)
func TestARefusedPodsLateEndpointIsDeletedAndItsPortsGoBack(t *testing.T) {
	for _, path := range startPaths {
		t.Run(path.name, func(t *testing.T) {
			f := newFixture(t, admitting(), retryEvery(20*time.Millisecond))
			a := f.eventPod("a", "9500:80")
			if _, err := f.core.Reconcile(ctx, nil); err != nil {
				t.Fatal(err)
			}
			for _, fault := range []hcnsim.Fault{
				{Op: hcnsim.OpCreateEndpoint, Kind: "timeout", Count: 1, After: true},   // made, its answer lost
				{Op: hcnsim.OpListEndpointsByName, Kind: "unavailable", Count: 1 << 20}, // a's retries cannot look
			} {
				if err := f.sim.InjectFault(fault); err != nil {
					t.Fatal(err)
				}
			}
			if err := waitResult(t, path.start(f, a)); !errors.Is(err, hcn.ErrTimeout) {
				t.Fatalf("a's start: %v, want HNS given up on", err)
			}
			if n := len(f.endpoints("a")); n != 1 {
				t.Fatalf("%d endpoints of a in HNS, want the one made late", n)
			}
			f.core.SetAdmission(rules("9500"))
			f.sim.ClearFaults()
			eventually(t, "a refused, its late endpoint deleted, 9500 free", func() bool {
				return errors.Is(f.core.st.lastErr("a"), admission.ErrDenied) && len(f.endpoints("a")) == 0 && f.free("a2", 9500)
			})
		})
	}
}

// free reports whether a sandbox id may claim TCP host port port: no
// other sandbox holds it in the index (the claim is not kept).
func (f *fixture) free(id string, port uint16) bool {
	f.core.st.mu.Lock()
	defer f.core.st.mu.Unlock()
	return f.core.st.index.conflict(id, []hcn.PortMappingPolicy{pp(hcn.TCP, port, "", hcn.NatFlagsLocalRoutedVip)}) == nil
}

// Issue 51, late effects: a pod stopped while the create it gave up on is
// still in HNS keeps its ports held until that create lands, and the late
// endpoint is deleted then: the next pod asking the port waits for it
// instead of meeting the late endpoint as HNS's port-in-use. (The stop gave
// the port back at once, the late endpoint landed as an orphan, and the
// next pod was refused until a resync.)
func TestAPodStoppedWhileItsCreateIsInHNSHoldsItsPortsUntilItLands(t *testing.T) {
	for _, path := range startPaths {
		t.Run(path.name, func(t *testing.T) {
			f := newFixture(t, retryEvery(time.Second)) // no retry of a's create before its stop
			bounded(t, f, 100*time.Millisecond)
			a, b := f.eventPod("a", "9500:80"), f.eventPod("b", "9500:80")
			if _, err := f.core.Reconcile(ctx, nil); err != nil {
				t.Fatal(err)
			}
			f.sim.SetOpLatency(hcnsim.OpCreateEndpoint, 400*time.Millisecond)
			if err := waitResult(t, path.start(f, a)); !errors.Is(err, hcn.ErrTimeout) {
				t.Fatalf("a's start: %v, want HNS given up on", err)
			}
			if err := waitResult(t, path.stop(f, a)); err != nil {
				t.Fatalf("a's stop: %v", err)
			}
			eventually(t, "a's create lands in HNS", func() bool { return len(f.endpoints("a")) == 1 })
			f.sim.SetOpLatency(hcnsim.OpCreateEndpoint, 0)
			done := path.start(f, b)
			eventually(t, "b mapped, a's late endpoint gone", func() bool {
				if errors.Is(f.core.st.lastErr("b"), hcn.ErrPortInUse) {
					t.Fatalf("b met a's late endpoint as HNS's port-in-use: %v", f.core.st.lastErr("b"))
				}
				eps := f.endpoints("b")
				return len(eps) == 1 && eps[0].Namespace != "" && len(f.endpoints("a")) == 0
			})
			<-done
		})
	}
}

// ... and a create that never lands holds the ports no longer than
// the late bound (two hcn.call_timeout): then they go to the next pod.
func TestThePortsOfACreateThatNeverLandsGoBackAfterTheBound(t *testing.T) {
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	f := newFixture(t, func(o *Options) { o.clock = clock }, retryEvery(10*time.Millisecond))
	a, b := f.eventPod("a", "9500:80"), f.eventPod("b", "9500:80")
	if _, err := f.core.Reconcile(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if err := f.sim.InjectFault(hcnsim.Fault{Op: hcnsim.OpCreateEndpoint, Kind: "timeout", Count: 1}); err != nil { // never made
		t.Fatal(err)
	}
	if _, err := f.start(a); !errors.Is(err, hcn.ErrTimeout) {
		t.Fatalf("a's start: %v, want HNS given up on", err)
	}
	if _, err := f.stop(a); err != nil {
		t.Fatal(err)
	}
	_, err := f.start(b)
	if !errors.Is(err, errHolderPending) {
		t.Fatalf("b's start: %v, want it to wait for a's given-up create", err)
	}
	never(t, 100*time.Millisecond, "b mapped while a's create may still land", func() bool { return len(f.endpoints("b")) > 0 })
	mu.Lock()
	now = now.Add(f.core.opt.LateBound)
	mu.Unlock()
	eventually(t, "b mapped once the bound has passed", func() bool {
		eps := f.endpoints("b")
		return len(eps) == 1 && eps[0].Namespace != ""
	})
}

// Issue 51: a build gives back the ports a given-up create asked that its
// endpoint does not map: here the CNI took over one of the pod's
// hostPorts meanwhile, and another pod asking that port is not told this
// one holds it.
func TestABuildGivesBackTheUnsurePortsItDoesNotMap(t *testing.T) {
	f := newFixture(t, func(o *Options) { o.Inputs = Inputs{Annotations: true, CRI: true} }, retryEvery(300*time.Millisecond))
	a := f.namedPod("a", "ns", "", `{"container_port":80,"host_port":9500},{"container_port":81,"host_port":9501}`)
	if _, err := f.core.Reconcile(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if err := f.sim.InjectFault(hcnsim.Fault{Op: hcnsim.OpCreateEndpoint, Kind: "timeout", Count: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.start(a); !errors.Is(err, hcn.ErrTimeout) {
		t.Fatalf("a's start: %v, want HNS given up on", err)
	}
	if f.free("b", 9501) {
		t.Fatal("9501, which a's given-up create asked, is not held")
	}
	// before a's retry the CNI maps 9501 on its own endpoint in a's
	// namespace
	bridge, err := f.sim.CreateNetwork(ctx, hcn.NetworkSpec{Name: "cbr0", Type: hcn.NetworkL2Bridge, Subnet: "10.244.0.0/24", Gateway: "10.244.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	cni, err := f.sim.CreateEndpoint(ctx, hcn.EndpointSpec{Name: "cbr0_a", NetworkID: bridge.ID,
		PortMappings: []hcn.PortMappingPolicy{pp(hcn.TCP, 9501, "", hcn.NatFlagsLocalRoutedVip)}})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.sim.AddNamespaceEndpoint(ctx, f.store.sbs["a"].NetNS, cni.ID); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a mapped with 9500 alone", func() bool {
		eps := f.endpoints("a")
		return len(eps) == 1 && eps[0].Namespace != "" && len(eps[0].PortMappings) == 1
	})
	if !f.free("b", 9501) {
		t.Fatal("9501, which the CNI maps and a's endpoint does not, is still held by a")
	}
}
