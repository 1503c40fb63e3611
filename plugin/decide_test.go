package plugin

import (
	"errors"
	"reflect"
	"testing"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/config"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/admission"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/request"
)

// What a pod would get, decided from values alone: every branch of
// decide, its snapshot, facts and inputs written out, no HNS and no
// containerd. Each case says what decide asks for next with the facts it
// has, and what it plans once it has them all.
func TestDecideFromValues(t *testing.T) {
	const ns hcn.GUID = "8F6A9B2C-1D3E-4F50-8A6B-7C8D9E0F1A2B"
	podDNS := hcn.DNS{Domain: "ns.svc.cluster.local", Search: []string{"ns.svc.cluster.local"}, ServerList: []string{"10.96.0.10"}}
	cniDNS := hcn.DNS{Domain: "cni.example", ServerList: []string{"10.244.0.2"}}
	pol, err := admission.Compile(config.DefaultAdmission())
	if err != nil {
		t.Fatal(err)
	}
	base := inputs{sources: request.Sources{Annotations: true, CRI: true}, policyOptions: request.PolicyOptions{LocalRoutedVIP: true},
		hyperVHandlers: []string{"runhcs-wcow-hypervisor"}}
	annotationsOnly := base
	annotationsOnly.sources = request.Sources{Annotations: true}
	admitting := base
	admitting.policy = pol
	admitting.labels = labelsAt{"ns": "privileged"}
	refusing := admitting
	refusing.labels = labelsAt{"ns": "baseline"}
	start := snap{id: "s", act: true, started: true, pod: Pod{ID: "s", Partial: true}, known: known{epsKnown: true}}
	record := func(meta []byte) facts {
		return facts{recordRead: true, record: &SandboxInfo{ID: "s", IsSandbox: true, NetNS: ns, Metadata: meta}}
	}
	hostPort := `{"container_port":80,"host_port":9001}`
	cni := func(dns hcn.DNS, ports ...uint16) []hcn.Endpoint {
		ep := hcn.Endpoint{ID: "cni", Name: "cbr0_s", NetworkID: "B1", Namespace: ns, DNS: dns}
		for _, p := range ports {
			ep.PortMappings = append(ep.PortMappings, hcn.PortMappingPolicy{Protocol: hcn.TCP, ExternalPort: p, InternalPort: 80, Flags: hcn.NatFlagsLocalRoutedVip})
		}
		return []hcn.Endpoint{ep}
	}
	ours := hcn.Endpoint{ID: "ours", Name: "nri-hcn-portmap-s", Namespace: ns,
		PortMappings: []hcn.PortMappingPolicy{{Protocol: hcn.TCP, ExternalPort: 9001, InternalPort: 80, Flags: hcn.NatFlagsLocalRoutedVip}}}
	withFacts := func(f facts, change func(*facts)) facts { change(&f); return f }
	type planned struct {
		ask    ask
		remove bool
		want   *want
		err    error // errors.Is
		check  func(t *testing.T, p plan)
	}
	for _, tc := range []struct {
		name string
		sn   snap
		f    facts
		in   inputs
		want planned
	}{
		{"a listing alone decides nothing", snap{id: "s", listing: true, listed: []hcn.Endpoint{ours}}, facts{}, base,
			planned{check: func(t *testing.T, p plan) {
				if !p.out.known.epsKnown || len(p.out.known.eps) != 1 || !p.out.known.sandbox {
					t.Errorf("known %+v: want what the listing showed", p.out.known)
				}
			}}},
		{"a stop removes, and says nothing is ours unless something was", snap{id: "s", act: true, stopped: true}, facts{}, base,
			planned{remove: true, check: func(t *testing.T, p plan) {
				if !p.notOurs || !p.removed.forgetCNI || p.removed.gone {
					t.Errorf("plan %+v", p)
				}
			}}},
		{"a stop of a container a listing of containerd lacked asks containerd", snap{id: "s", act: true, stopped: true, verify: true}, facts{}, base,
			planned{ask: askRecord}},
		{"... which no longer has it: gone once removed", snap{id: "s", act: true, stopped: true, verify: true},
			facts{recordRead: true, recordErr: ErrSandboxNotFound}, base, planned{remove: true, check: func(t *testing.T, p plan) {
				if !p.removed.gone {
					t.Errorf("plan %+v: want gone after the removal", p)
				}
			}}},
		{"a whole pod with a bad annotation fails with no read", snap{id: "s", act: true, pod: Pod{ID: "s", Namespace: "ns", Name: "p",
			Annotations: map[string]string{request.AnnotationPortMappings: "80:80/sctp"}}}, facts{}, annotationsOnly, planned{err: ErrInvalidPod}},
		{"a whole pod asking nothing, with nothing, costs nothing", snap{id: "s", act: true, pod: Pod{ID: "s", Namespace: "ns", Name: "p"},
			known: known{epsKnown: true}}, facts{}, annotationsOnly, planned{}},
		{"a partial pod asks containerd's record", start, facts{}, base, planned{ask: askRecord}},
		{"containerd no longer has it: removed, gone", start, facts{recordRead: true, recordErr: ErrSandboxNotFound}, base,
			planned{remove: true, err: ErrSandboxNotFound, check: func(t *testing.T, p plan) {
				if !p.removed.gone || !p.removed.forgetCNI {
					t.Errorf("plan %+v", p)
				}
			}}},
		{"containerd does not answer", start, facts{recordRead: true, recordErr: ErrContainerd}, base, planned{err: ErrContainerd}},
		{"an application container", start, facts{recordRead: true, record: &SandboxInfo{ID: "s"}}, base, planned{err: ErrNotSandbox}},
		{"no start seen: containerd's task is asked", snap{id: "s", act: true, pod: Pod{ID: "s", Partial: true}}, record(criMeta("9001:80", "")),
			base, planned{ask: askTask}},
		{"its task stopped: removed for good", snap{id: "s", act: true, pod: Pod{ID: "s", Partial: true}},
			withFacts(record(criMeta("9001:80", "")), func(f *facts) { f.taskRead, f.task = true, TaskStopped }), base,
			planned{remove: true, check: func(t *testing.T, p plan) {
				if !p.out.known.final {
					t.Errorf("known %+v: want final", p.out.known)
				}
			}}},
		{"its task runs: HCN's namespace is asked", snap{id: "s", act: true, pod: Pod{ID: "s", Partial: true}},
			withFacts(record(criMeta("9001:80", "")), func(f *facts) { f.taskRead, f.task = true, TaskRunning }), base, planned{ask: askNamespace}},
		{"its namespace is gone: removed", snap{id: "s", act: true, pod: Pod{ID: "s", Partial: true}},
			withFacts(record(criMeta("9001:80", "")), func(f *facts) { f.taskRead, f.task, f.nsRead = true, TaskRunning, true }), base,
			planned{remove: true}},
		{"an annotation with the pod's DNS: its endpoint, no other read", start, record(criMetaDNS("9001:80", "10.96.0.10")), base,
			planned{want: &want{netns: ns, policies: []hcn.PortMappingPolicy{ours.PortMappings[0]}, dns: podDNS}}},
		{"a bad annotation in the record", start, record(criMeta("9001:80,9001:80", "")), base, planned{err: ErrInvalidPod}},
		{"nothing asked: what it has is removed", start, record(criMeta("", "")), base, planned{remove: true}},
		{"no Windows namespace: skipped, removed", start, withFacts(record(criMeta("9001:80", "")), func(f *facts) { f.record.NetNS = "" }), base,
			planned{remove: true, check: func(t *testing.T, p plan) {
				if len(p.out.skipped) != 1 || p.out.skipped[0] != SkipNoNetNS {
					t.Errorf("skipped %v", p.out.skipped)
				}
			}}},
		{"Hyper-V isolated: refused, what it has removed", start, withFacts(record(criMeta("9001:80", "")), func(f *facts) { f.record.HyperV = "SandboxIsolation HYPERVISOR" }),
			base, planned{remove: true, err: ErrHyperV}},
		{"admitted by its namespace's level", start, record(criMetaDNS("9001:80", "10.96.0.10")), admitting,
			planned{want: &want{netns: ns, policies: []hcn.PortMappingPolicy{ours.PortMappings[0]}, dns: podDNS}}},
		{"refused by its namespace's level (the labels as of the sync)", start, record(criMetaDNS("9001:80", "10.96.0.10")), refusing,
			planned{err: admission.ErrPodSecurity}},
		{"hostPorts: the namespace's other endpoints are asked", start, record(criMetaWith("", hostPort, "10.96.0.10")), base, planned{ask: askNeighbours}},
		{"no DNS in the record: the namespace's other endpoints are asked", start, record(criMeta("9001:80", "")), base, planned{ask: askNeighbours}},
		{"no DNS in the record: the CNI endpoint's", start,
			withFacts(record(criMeta("9001:80", "")), func(f *facts) { f.neighboursRead, f.neighbours = true, cni(cniDNS) }), base,
			planned{want: &want{netns: ns, policies: []hcn.PortMappingPolicy{ours.PortMappings[0]}, dns: cniDNS}}},
		// issue 44: the pod's own DNS is never replaced by the CNI's,
		// even where the CNI's endpoint is read (a pod with hostPorts)
		{"the pod's own DNS beside a CNI endpoint with other DNS", start,
			withFacts(record(criMetaWith("", hostPort, "10.96.0.10")), func(f *facts) { f.neighboursRead, f.neighbours = true, cni(cniDNS) }), base,
			planned{want: &want{netns: ns, policies: []hcn.PortMappingPolicy{ours.PortMappings[0]}, dns: podDNS}}},
		{"the CNI maps a hostPort: its network's type is asked", start,
			withFacts(record(criMetaWith("", hostPort, "10.96.0.10")), func(f *facts) { f.neighboursRead, f.neighbours = true, cni(cniDNS, 9001) }), base,
			planned{ask: askNetworkTypes, check: func(t *testing.T, p plan) {
				if !reflect.DeepEqual(p.networks, []string{"B1"}) {
					t.Errorf("networks %v", p.networks)
				}
			}}},
		// issue 44: our endpoint is removed once the CNI maps everything
		// the pod asks (it would hold a host port nobody asks for)
		{"the CNI maps every hostPort: ours is removed", snap{id: "s", act: true, started: true, pod: Pod{ID: "s", Partial: true},
			known: known{epsKnown: true, committed: true, eps: []hcn.Endpoint{ours}, ports: ours.PortMappings}},
			withFacts(record(criMetaWith("", hostPort, "10.96.0.10")), func(f *facts) {
				f.neighboursRead, f.neighbours = true, cni(cniDNS, 9001)
				f.netTypesRead, f.netTypes = true, map[string]hcn.NetworkType{hcn.CanonicalGUID("B1"): hcn.NetworkL2Bridge}
			}), base,
			planned{remove: true, check: func(t *testing.T, p plan) {
				if len(p.out.known.cni) != 1 || p.out.mapped == nil || len(p.out.mapped.cni) != 1 {
					t.Errorf("known %+v mapped %+v: want the CNI's mapping known", p.out.known, p.out.mapped)
				}
			}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := decide(tc.sn, tc.f, tc.in)
			if p.ask != tc.want.ask {
				t.Fatalf("asks %v, want %v (plan %+v)", p.ask, tc.want.ask, p)
			}
			if p.ask != decided {
				if tc.want.check != nil {
					tc.want.check(t, p)
				}
				return
			}
			if p.remove != tc.want.remove {
				t.Errorf("remove %v, want %v", p.remove, tc.want.remove)
			}
			if (tc.want.err == nil) != (p.err == nil) || (tc.want.err != nil && !errors.Is(p.err, tc.want.err)) {
				t.Errorf("err %v, want %v", p.err, tc.want.err)
			}
			if (tc.want.want == nil) != (p.want == nil) || (p.want != nil && !reflect.DeepEqual(*p.want, *tc.want.want)) {
				t.Errorf("wants %+v, want %+v", p.want, tc.want.want)
			}
			if tc.want.check != nil {
				tc.want.check(t, p)
			}
		})
	}
}
