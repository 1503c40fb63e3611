package plugin

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn/hcnsim"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/request"
)

// 4: a pod whose hostPorts its CNI maps, every one, still gets its report
// (the event and the condition say who maps each port).
func TestPodWhoseCNIMapsEveryHostPortIsReported(t *testing.T) {
	rep := &reports{}
	f := newFixture(t, func(o *Options) { o.Reporter = rep; o.Inputs = Inputs{Annotations: true, CRI: true} })
	f.sandbox("s", "")
	f.store.sbs["s"].Metadata = criMeta("", criPorts(1, 1)) // hostPort 9001
	bridge, err := f.sim.CreateNetwork(ctx, hcn.NetworkSpec{Name: "cbr0", Type: hcn.NetworkNAT, Subnet: "10.244.0.0/24", Gateway: "10.244.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	cni, err := f.sim.CreateEndpoint(ctx, hcn.EndpointSpec{Name: "cbr0_s", NetworkID: bridge.ID,
		PortMappings: []hcn.PortMappingPolicy{{Protocol: hcn.TCP, ExternalPort: 9001, InternalPort: 80}}})
	if err == nil {
		err = f.sim.AddNamespaceEndpoint(ctx, f.store.sbs["s"].NetNS, cni.ID)
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := f.startRetrying(Pod{ID: "s", Partial: true}); err != nil {
		t.Fatal(err)
	}
	if eps := f.endpoints("s"); len(eps) != 0 {
		t.Fatalf("an endpoint of ours for ports the CNI maps: %+v", eps)
	}
	got, ok := rep.last()
	if !ok || !got.Mapped || got.Endpoint != "" || len(got.CNI) != 1 || got.CNI[0].Endpoint != cni.ID || got.Pod.Name != "p" {
		t.Fatalf("report %+v (sent %v), want the pod told that the CNI's endpoint %s maps 9001", got, ok, cni.ID)
	}
}

// Issue 29: containerd's CRI record of a sandbox (its hostPorts) is the
// runtime's, not the pod author's: one that does not decode (a containerd
// whose format changed) never fails the pod, under either failure policy.
// Its annotation is still mapped, its hostPorts are reported unknown (a
// Warning naming the record and the decode error, a metric), and they are
// mapped once the record reads again.
func TestARecordThatDoesNotDecodeNeverFailsThePod(t *testing.T) {
	const bad = `{"Version":"v1","Metadata":{"ID":"s","Config":{"port_mappings":[{"host_port":"9001"}]}}}` // a string where a number was
	for _, tc := range []struct {
		name       string
		annotation string
		failOpen   bool
		partial    bool // the event path: only containerd's record says what the pod is
	}{
		{"annotated pod, fail-open", "8080:80", true, false},
		{"annotated pod, fail-closed", "8080:80", false, false},
		{"pod that asks for nothing", "", false, false},
		{"the event path", "", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep, obs := &reports{}, &skips{}
			f := newFixture(t, func(o *Options) {
				o.Reporter, o.Observer, o.Inputs, o.FailOpen = rep, obs, Inputs{Annotations: true, CRI: true}, tc.failOpen
			})
			p := f.sandbox("s", tc.annotation)
			f.store.sbs["s"].Metadata = []byte(bad)
			if tc.partial {
				p = Pod{ID: "s", Partial: true}
			}
			if err := f.startRetrying(p); err != nil {
				t.Fatalf("the pod failed for containerd's record: %v", err)
			}
			eps := f.endpoints("s")
			if want := min(len(tc.annotation), 1); len(eps) != want {
				t.Fatalf("endpoints %+v, want %d (the annotation's)", eps, want)
			}
			if obs.of(SkipCRIRecordUnreadable) == 0 {
				t.Error("no metric says the record does not decode")
			}
			if !tc.partial {
				got, ok := rep.last()
				if !ok || got.Mapped || got.Reason != ReasonHostPortsUnknown || !strings.Contains(got.Err.Error(), request.ExtensionMetadata) ||
					!strings.Contains(got.Err.Error(), "cannot unmarshal") {
					t.Fatalf("report %+v, want %s naming the record and the decode error", got, ReasonHostPortsUnknown)
				}
				if tc.annotation != "" && got.Endpoint != eps[0].ID {
					t.Fatalf("report %+v does not say the annotation's ports are mapped", got)
				}
			}
			// the record reads again (say, after a fix): the next sync maps the hostPorts
			f.store.mu.Lock()
			f.store.sbs["s"].Metadata = criMeta(tc.annotation, criPorts(1, 1))
			f.store.mu.Unlock()
			if _, err := f.core.ReconcileAll(ctx); err != nil {
				t.Fatal(err)
			}
			eps = f.endpoints("s")
			if len(eps) != 1 || !slices.ContainsFunc(eps[0].PortMappings, func(m hcn.PortMappingPolicy) bool { return m.ExternalPort == 9001 }) {
				t.Fatalf("after the record reads again: %+v, want hostPort 9001 mapped", eps)
			}
		})
	}
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
				cni, eps := f.startBesideCNI(t, "s", cniSpec)
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

// Issue 55: the report of a pod started by NRI (a whole request, of which
// the state keeps only what it reads) still says where kubelet got the
// pod, so package kube tells a static pod from one of the API server.
func TestAReportSaysWhereKubeletGotThePod(t *testing.T) {
	rep := &reports{}
	f := newFixture(t, func(o *Options) { o.Reporter = rep })
	p := f.sandbox("static", "8080:80")
	p.Annotations[AnnotationConfigSource] = "file"
	p.Annotations["example.com/other"] = "x"
	if _, err := f.start(p); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the pod reported", func() bool { _, ok := rep.last(); return ok })
	if r, _ := rep.last(); r.Pod.Annotations[AnnotationConfigSource] != "file" || r.Pod.Annotations["example.com/other"] != "" {
		t.Fatalf("the report's annotations %v: want kubelet's config.source kept, and nothing the controller does not read", r.Pod.Annotations)
	}
}

// Issue 56: EKS's vpc-bridge maps a pod's hostPorts on its own endpoint
// with LocalRoutedVip and no VIP, dropping a hostIP (aws/amazon-vpc-cni-
// plugins PR #93). HNS then holds the port on every address: the plugin
// leaves it to the CNI (a mapping of its own on the host IP would be a
// second one of the port) and says the host IP was dropped.
func TestAHostIPTheCNIDroppedIsSaid(t *testing.T) {
	rep := &reports{}
	f := newFixture(t, func(o *Options) { o.Reporter = rep })
	f.core.opt.Inputs = Inputs{Annotations: true, CRI: true}
	p := f.sandbox("s", "")
	p.Partial = true
	f.store.sbs["s"].Metadata = criMeta("", `{"container_port":80,"host_port":9001,"host_ip":"10.0.0.4"},{"container_port":80,"host_port":9002}`)
	net, err := f.sim.CreateNetwork(ctx, hcn.NetworkSpec{Name: "vpcbr", Type: hcn.NetworkL2Bridge, Subnet: "10.244.0.0/24", Gateway: "10.244.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	cni, eps := f.startBesideCNI(t, "s", hcn.EndpointSpec{Name: "vpcbr_s", NetworkID: net.ID, // vpc-bridge: LocalRoutedVip, no VIP
		PortMappings: []hcn.PortMappingPolicy{{Protocol: hcn.TCP, ExternalPort: 9001, InternalPort: 80, Flags: hcn.NatFlagsLocalRoutedVip}}})
	if len(eps) != 1 || !hcn.SamePolicies(eps[0].PortMappings, []hcn.PortMappingPolicy{{Protocol: hcn.TCP, ExternalPort: 9002, InternalPort: 80, Flags: 1}}) {
		t.Fatalf("our endpoints %+v, want one mapping 9002 only (9001 is the CNI's, on every address)", eps)
	}
	got, ok := rep.last()
	if !ok || !got.Mapped || len(got.CNI) != 1 || got.CNI[0].Endpoint != cni.ID || got.CNI[0].HostIPDropped != "10.0.0.4" ||
		!strings.Contains(got.CNI[0].String(), "the CNI dropped the host IP 10.0.0.4") {
		t.Fatalf("report %+v, want 9001 the CNI's, its host IP 10.0.0.4 said dropped", got)
	}
}

// startBesideCNI attaches the CNI's endpoint cniSpec in sandbox id's
// namespace, starts the sandbox and returns the CNI's endpoint and ours.
func (f *fixture) startBesideCNI(t *testing.T, id string, cniSpec hcn.EndpointSpec) (*hcn.Endpoint, []hcn.Endpoint) {
	t.Helper()
	cni, err := f.sim.CreateEndpoint(ctx, cniSpec)
	if err == nil {
		err = f.sim.AddNamespaceEndpoint(ctx, f.store.sbs[id].NetNS, cni.ID)
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := f.startRetrying(Pod{ID: id, Partial: true}); err != nil {
		t.Fatalf("start: %v", err)
	}
	return cni, f.endpoints(id)
}
