package plugin

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn/hcnsim"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/request"
)

func criMeta(annotation, portMappings string) []byte {
	ann := ""
	if annotation != "" {
		ann = `,"annotations":{"` + request.AnnotationPortMappings + `":"` + annotation + `"}`
	}
	return []byte(`{"Version":"v1","Metadata":{"ID":"x","Name":"p_ns_uid_0","Config":{"metadata":{"name":"p","uid":"uid","namespace":"ns"},"port_mappings":[` +
		portMappings + `]` + ann + `}}}`)
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

func TestCoreMappingSources(t *testing.T) {
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
			"annotation and CRI hostPorts together: 4 entries, more than the limit of 3"},
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

func TestReconcileAllFindsSandboxesFromContainerd(t *testing.T) {
	f := newFixture(t)
	f.sandbox("a", "")
	f.store.sbs["a"].Metadata = criMeta("7070:70", "")
	f.sandbox("b", "")
	f.store.sbs["b"].Metadata = criMeta("", "") // no request
	sum, err := f.core.ReconcileAll(ctx)
	if err != nil || sum.Created != 1 || sum.Failed != 0 {
		t.Fatalf("ReconcileAll = %+v, %v", sum, err)
	}
	if len(f.endpoints("a")) != 1 || len(f.endpoints("b")) != 0 {
		t.Fatalf("state: %+v", f.sim.State().Endpoints)
	}
	// the annotation is gone from the record (an edited pod): the endpoint goes
	f.store.sbs["a"].Metadata = criMeta("", "")
	if sum, err := f.core.ReconcileAll(ctx); err != nil || sum.Deleted != 1 {
		t.Fatalf("ReconcileAll = %+v, %v", sum, err)
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

// Issue 26: with hostPort as a source a start asks HNS what else the pod's
// namespace holds (a CNI endpoint may map the port already). It asks the
// namespace, not the node: the same HNS calls with 1 or 200 other pods'
// endpoints on the node.
func TestStartWithHostPortsCostsTheSameOnAFullNode(t *testing.T) {
	calls := func(others int) map[string]int {
		f := newFixture(t)
		f.core.opt.Inputs = Inputs{Annotations: true, CRI: true}
		if err := f.core.LoadPorts(ctx); err != nil {
			t.Fatal(err)
		}
		cni, err := f.sim.CreateNetwork(ctx, hcn.NetworkSpec{Name: "cbr0", Type: hcn.NetworkL2Bridge, Subnet: "10.244.0.0/16"})
		if err != nil {
			t.Fatal(err)
		}
		for i := range others { // other pods, each with its CNI endpoint in its own namespace
			ep, err := f.sim.CreateEndpoint(ctx, hcn.EndpointSpec{Name: fmt.Sprint("cni-", i), NetworkID: cni.ID})
			if err == nil {
				err = f.sim.AddNamespaceEndpoint(ctx, f.sim.CreateNamespace(""), ep.ID)
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		warm := f.sandbox("warm", "")
		f.store.sbs["warm"].Metadata = criMeta("", `{"container_port":80,"host_port":9001}`)
		if err := f.core.StartPod(ctx, warm); err != nil { // the network
			t.Fatal(err)
		}
		before := f.sim.Calls()
		p := f.sandbox("p", "")
		f.store.sbs["p"].Metadata = criMeta("", `{"container_port":80,"host_port":9000}`)
		if err := f.core.StartPod(ctx, p); err != nil || len(f.endpoints("p")) != 1 {
			t.Fatalf("StartPod: %v, %+v", err, f.endpoints("p"))
		}
		out := map[string]int{}
		for op, n := range f.sim.Calls() {
			if d := n - before[op]; d > 0 {
				out[op] = d
			}
		}
		return out
	}
	one, many := calls(1), calls(200)
	if !maps.Equal(one, many) || many[hcnsim.OpListEndpoints] != 0 {
		t.Fatalf("HNS calls for a start: %v with 1 other pod, %v with 200", one, many)
	}
}

// Issue 26, cost: with hostPort on (the default), a pod whose CRI record
// has no hostPorts gives its CNI nothing to map, so its start asks HNS
// nothing about the namespace: the create and the attach, as with the
// annotation alone. A pod with hostPorts asks the namespace (and opens its
// other endpoints).
func TestOnlyAPodWithHostPortsAsksWhatTheCNIMaps(t *testing.T) {
	for _, tt := range []struct {
		name, annotation, ports string
		want                    map[string]int
	}{
		{"annotation only", "9010:80", `{"container_port":81}`, // a containerPort without hostPort
			map[string]int{hcnsim.OpCreateEndpoint: 1, hcnsim.OpAddNamespaceEndpoint: 1}},
		{"hostPort", "", `{"container_port":80,"host_port":9011}`,
			map[string]int{hcnsim.OpGetNamespace: 1, hcnsim.OpGetEndpoint: 1, hcnsim.OpenedEndpoint: 1, hcnsim.OpCreateEndpoint: 1, hcnsim.OpAddNamespaceEndpoint: 1}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			f.core.opt.Inputs = Inputs{Annotations: true, CRI: true}
			if err := f.core.LoadPorts(ctx); err != nil {
				t.Fatal(err)
			}
			warm := f.sandbox("warm", "")
			f.store.sbs["warm"].Metadata = criMeta("9001:80", "")
			if err := f.core.StartPod(ctx, warm); err != nil { // the network
				t.Fatal(err)
			}
			p := f.sandbox("p", tt.annotation)
			f.store.sbs["p"].Metadata = criMeta(tt.annotation, tt.ports)
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
			before := f.sim.Calls()
			if err := f.core.StartPod(ctx, p); err != nil || len(f.endpoints("p")) != 1 {
				t.Fatalf("StartPod: %v, %+v", err, f.endpoints("p"))
			}
			got := map[string]int{}
			for op, n := range f.sim.Calls() {
				if d := n - before[op]; d > 0 {
					got[op] = d
				}
			}
			if !maps.Equal(got, tt.want) {
				t.Fatalf("HNS calls for the start: %v, want %v", got, tt.want)
			}
		})
	}
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

// Issue 26: for each of a pod's hostPorts, who maps it: the CNI's endpoint
// (skipped by the plugin, reported as the CNI's) or the plugin's. A CNI
// mapping of a shape known not to work (a v1 NAT policy, or a v2
// PortMapping without LocalRoutedVip, on an L2Bridge network: no host
// route, Windows-Containers 360) is reported as a failure naming the CNI's
// endpoint, the policy and the fix, and is not duplicated (HNS takes a port
// once). How HNS shows a v1 NAT policy through the v2 API is not known:
// both variants of the rule reach the same verdict.
func TestWhoMapsEachHostPort(t *testing.T) {
	type shape int
	const (
		v2Routed shape = iota // PortMapping with LocalRoutedVip
		v2Plain               // PortMapping without it
		v1NAT                 // a v1 NAT policy
	)
	for _, tc := range []struct {
		name    string
		network hcn.NetworkType
		shape   shape
		works   bool
	}{
		{"NAT network, v2 local-routed", hcn.NetworkNAT, v2Routed, true},
		{"NAT network, v2 without the flag", hcn.NetworkNAT, v2Plain, true},
		{"NAT network, v1 NAT", hcn.NetworkNAT, v1NAT, true},
		{"L2Bridge, v2 local-routed", hcn.NetworkL2Bridge, v2Routed, true},
		{"L2Bridge, v2 without the flag", hcn.NetworkL2Bridge, v2Plain, false},
		{"L2Bridge, v1 NAT", hcn.NetworkL2Bridge, v1NAT, false},
		{"Overlay, v2 without the flag", hcn.NetworkOverlay, v2Plain, true},
	} {
		for _, asPortMapping := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/v1-nat-as-portmapping=%v", tc.name, asPortMapping), func(t *testing.T) {
				rep := &reports{}
				f := newFixture(t, func(o *Options) { o.Reporter = rep })
				f.sim.SetRules(hcnsim.Rules{V1NATAsPortMapping: asPortMapping})
				f.core.opt.Inputs = Inputs{Annotations: true, CRI: true}
				p := f.sandbox("s", "")
				p.Partial = true
				f.store.sbs["s"].Metadata = criMeta("", criPorts(1, 2)) // hostPorts 9001, 9002
				spec := hcn.NetworkSpec{Name: "cni", Type: tc.network, Subnet: "10.244.0.0/24", Gateway: "10.244.0.1"}
				net, err := f.sim.CreateNetwork(ctx, spec)
				if err != nil {
					t.Fatal(err)
				}
				policy := hcn.PortMappingPolicy{Protocol: hcn.TCP, ExternalPort: 9001, InternalPort: 80}
				cniSpec := hcn.EndpointSpec{Name: "cni_s", NetworkID: net.ID}
				switch tc.shape {
				case v2Routed:
					policy.Flags = hcn.NatFlagsLocalRoutedVip
					cniSpec.PortMappings = []hcn.PortMappingPolicy{policy}
				case v2Plain:
					cniSpec.PortMappings = []hcn.PortMappingPolicy{policy}
				case v1NAT:
					cniSpec.NATPolicies = []hcn.PortMappingPolicy{policy}
				}
				cni, err := f.sim.CreateEndpoint(ctx, cniSpec)
				if err == nil {
					err = f.sim.AddNamespaceEndpoint(ctx, f.store.sbs["s"].NetNS, cni.ID)
				}
				if err != nil {
					t.Fatal(err)
				}
				if err := f.startRetrying(Pod{ID: "s", Partial: true}); err != nil {
					t.Fatalf("start: %v", err)
				}
				eps := f.endpoints("s")
				ours := []hcn.PortMappingPolicy{{Protocol: hcn.TCP, ExternalPort: 9002, InternalPort: 80, Flags: 1}}
				if len(eps) != 1 || !hcn.SamePolicies(eps[0].PortMappings, ours) {
					t.Fatalf("our endpoints %+v, want one mapping 9002 only (9001 is the CNI's)", eps)
				}
				got, ok := rep.last()
				if !ok || got.Endpoint != eps[0].ID || len(got.CNI) != 1 || got.CNI[0].Endpoint != cni.ID || got.CNI[0].Works != tc.works {
					t.Fatalf("report %+v, want 9002 ours and 9001 the CNI's (works %v)", got, tc.works)
				}
				if tc.works != got.Mapped || tc.works != (got.Reason == "") {
					t.Fatalf("report mapped %v, reason %q; want mapped %v", got.Mapped, got.Reason, tc.works)
				}
				if !tc.works {
					msg := got.Err.Error()
					if got.Reason != ReasonCNIMapping || !strings.Contains(msg, cni.ID) || !strings.Contains(msg, "*:9001->80/tcp") ||
						!strings.Contains(msg, "localRoutedPortMapping") {
						t.Fatalf("report %s: %q; want it to name the CNI endpoint, the policy and the fix", got.Reason, msg)
					}
				}
				// HNS holds 9001 once: the CNI's
				n := 0
				for _, ep := range f.sim.State().Endpoints {
					for _, q := range slices.Concat(ep.PortMappings, ep.NATPolicies) {
						if q.ExternalPort == 9001 {
							n++
						}
					}
				}
				if n != 1 {
					t.Fatalf("host port 9001 mapped %d times", n)
				}
			})
		}
	}
}
