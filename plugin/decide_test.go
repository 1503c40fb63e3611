package plugin

import (
	"errors"
	"net/netip"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/admission"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/hostsockets"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/request"
)

// What a pod would get, decided from values alone: every branch of
// decide, its snapshot, facts and inputs written out, no HNS and no
// containerd. Each case says what decide asks for next with the facts it
// has, and what it plans once it has them all: every step, HNS's
// included (keep, delete, create, attach with its rollback).
func TestDecideFromValues(t *testing.T) {
	const ns hcn.GUID = "8F6A9B2C-1D3E-4F50-8A6B-7C8D9E0F1A2B"
	podDNS := hcn.DNS{Domain: "ns.svc.cluster.local", Search: []string{"ns.svc.cluster.local"}, ServerList: []string{"10.96.0.10"}}
	cniDNS := hcn.DNS{Domain: "cni.example", ServerList: []string{"10.244.0.2"}}
	pol, err := admission.Compile(testAdmission())
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	base := inputs{now: now, lateBound: 20 * time.Second, sources: request.Sources{Annotations: true, CRI: true}, policyOptions: request.PolicyOptions{LocalRoutedVIP: true},
		hyperVHandlers: []string{"runhcs-wcow-hypervisor"}}
	annotationsOnly := base
	annotationsOnly.sources = request.Sources{Annotations: true}
	labelled := func(level string, at time.Time) inputs {
		in := base
		in.policy = pol
		in.labels = &admission.Labels{Enforce: map[string]admission.Label{"ns": {Value: level, Labelled: true}}, Heard: now, MaxAge: time.Minute, At: at}
		return in
	}
	admitting, refusing, stale := labelled("privileged", now), labelled("baseline", now), labelled("privileged", now.Add(2*time.Minute))
	start := snap{id: "s", act: true, started: true, pod: Pod{ID: "s", Partial: true}, known: known{epsKnown: true}}
	route := hcn.Route{DestinationPrefix: "0.0.0.0/0", NextHop: "172.30.0.1", Metric: 5000}
	target := hcn.Target{NetworkID: "N1", Routes: []hcn.Route{route}, Prefix: "nri-hcn-portmap-"}
	// record is the facts once containerd's record is read: the request
	// resolved from it as the sync resolves it, and the network known
	record := func(meta []byte) facts {
		var f facts
		f.record.set(&SandboxInfo{ID: "s", IsSandbox: true, NetNS: ns, Metadata: meta}, nil)
		f.request.set(request.Resolve(request.Ask{Pod: Pod{ID: "s", Partial: true}, Metadata: meta, Sources: base.sources, Policy: base.policyOptions}))
		f.target.set(target, nil)
		return f
	}
	hostPort := `{"container_port":80,"host_port":9001}`
	cni := func(dns hcn.DNS, ports ...uint16) []hcn.Endpoint {
		ep := hcn.Endpoint{ID: "cni", Name: "cbr0_s", NetworkID: "B1", Namespace: ns, DNS: dns}
		for _, p := range ports {
			ep.PortMappings = append(ep.PortMappings, hcn.PortMappingPolicy{Protocol: hcn.TCP, ExternalPort: p, InternalPort: 80, Flags: hcn.NatFlagsLocalRoutedVip})
		}
		return []hcn.Endpoint{ep}
	}
	p9001 := hcn.PortMappingPolicy{Protocol: hcn.TCP, ExternalPort: 9001, InternalPort: 80, Flags: hcn.NatFlagsLocalRoutedVip}
	p9002 := hcn.PortMappingPolicy{Protocol: hcn.TCP, ExternalPort: 9002, InternalPort: 80, Flags: hcn.NatFlagsLocalRoutedVip}
	ours := hcn.Endpoint{ID: "ours", Name: "nri-hcn-portmap-s", NetworkID: "N1", Namespace: ns, Routes: []hcn.Route{route},
		PortMappings: []hcn.PortMappingPolicy{p9001}}
	with := func(ep hcn.Endpoint, change func(*hcn.Endpoint)) hcn.Endpoint { change(&ep); return ep }
	holdingOurs := func(eps ...hcn.Endpoint) snap {
		sn := start
		sn.known = known{epsKnown: true, committed: true, eps: eps, ports: []hcn.PortMappingPolicy{p9001}}
		return sn
	}
	withFacts := func(f facts, change func(*facts)) facts { change(&f); return f }
	spec := func(dns hcn.DNS, ps ...hcn.PortMappingPolicy) hcn.EndpointSpec {
		return target.Spec(hcn.Desired{SandboxID: "s", Namespace: ns, Policies: ps, DNS: dns})
	}
	create := func(dns hcn.DNS, ps ...hcn.PortMappingPolicy) []hcn.Step {
		return []hcn.Step{{Kind: hcn.StepCreate, Spec: spec(dns, ps...)}, {Kind: hcn.StepAttach, Namespace: ns, Rollback: true}}
	}
	del := func(ep hcn.Endpoint) hcn.Step { return hcn.Step{Kind: hcn.StepDelete, Endpoint: ep} }
	// unsure is a sandbox whose create was given up on since, its ports
	// held; what HNS holds is not settled
	unsure := func(sn snap, since time.Time) snap {
		sn.known = known{committed: true, unsure: []hcn.PortMappingPolicy{p9001}, unsureSince: since}
		return sn
	}
	late := with(ours, func(ep *hcn.Endpoint) { ep.ID, ep.Namespace = "late", "" })
	// issue 56: the node's own sockets read
	sockets := base
	sockets.hostSockets = true
	sqlOn := func(port uint16) []hostsockets.Socket {
		return []hostsockets.Socket{{Protocol: hcn.TCP, Addr: netip.MustParseAddr("0.0.0.0"), Port: port, PID: 2100, Program: "sqlservr.exe"}}
	}
	var rtp []hcn.PortMappingPolicy // a 1000-port RTP block
	for port := uint16(20000); port <= 20999; port++ {
		rtp = append(rtp, hcn.PortMappingPolicy{Protocol: hcn.UDP, ExternalPort: port, InternalPort: port, Flags: hcn.NatFlagsLocalRoutedVip})
	}
	errUnread := errors.New("iphlpapi: no table")
	withSockets := func(f facts, socks []hostsockets.Socket, err error) facts { f.sockets.set(socks, err); return f }
	type planned struct {
		ask    ask
		remove bool
		want   *wanted
		steps  []hcn.Step // nil: none
		err    error      // errors.Is
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
		{"a stop removes, and says nothing is ours unless something was", snap{id: "s", act: true, stopped: true, known: known{epsKnown: true}},
			facts{}, base, planned{remove: true, check: func(t *testing.T, p plan) {
				if !p.notOurs || !p.removed.forgetCNI || p.removed.gone {
					t.Errorf("plan %+v", p)
				}
			}}},
		{"a stop deletes what it knows is there", snap{id: "s", act: true, stopped: true, sandbox: true, known: holdingOurs(ours).known},
			facts{}, base, planned{remove: true, steps: []hcn.Step{del(ours)}}},
		{"a stop with nothing known asks HNS", snap{id: "s", act: true, stopped: true, sandbox: true}, facts{}, base, planned{ask: askEndpoints}},
		{"a stop of a container a listing of containerd lacked asks containerd", snap{id: "s", act: true, stopped: true, verify: true}, facts{}, base,
			planned{ask: askRecord}},
		{"... which no longer has it: gone once removed", snap{id: "s", act: true, stopped: true, verify: true, known: known{epsKnown: true}},
			withFacts(facts{}, func(f *facts) { f.record.set(nil, ErrSandboxNotFound) }), base, planned{remove: true, check: func(t *testing.T, p plan) {
				if !p.removed.gone {
					t.Errorf("plan %+v: want gone after the removal", p)
				}
			}}},
		{"a whole pod with a bad annotation fails with no read", snap{id: "s", act: true, known: known{epsKnown: true}, pod: Pod{ID: "s", Namespace: "ns", Name: "p",
			Annotations: map[string]string{request.AnnotationPortMappings: "80:80/sctp"}}}, facts{}, annotationsOnly, planned{err: ErrInvalidPod}},
		{"a whole pod asking nothing, with nothing, costs nothing", snap{id: "s", act: true, pod: Pod{ID: "s", Namespace: "ns", Name: "p"},
			known: known{epsKnown: true}}, facts{}, annotationsOnly, planned{}},
		{"a partial pod asks containerd's record", start, facts{}, base, planned{ask: askRecord}},
		{"containerd no longer has it: removed, gone", start, withFacts(facts{}, func(f *facts) { f.record.set(nil, ErrSandboxNotFound) }), base,
			planned{remove: true, err: ErrSandboxNotFound, check: func(t *testing.T, p plan) {
				if !p.removed.gone || !p.removed.forgetCNI {
					t.Errorf("plan %+v", p)
				}
			}}},
		{"containerd does not answer", start, withFacts(facts{}, func(f *facts) { f.record.set(nil, ErrContainerd) }), base, planned{err: ErrContainerd}},
		{"an application container", start, withFacts(facts{}, func(f *facts) { f.record.set(&SandboxInfo{ID: "s"}, nil) }), base, planned{err: ErrNotSandbox}},
		{"no start seen: containerd's task is asked", snap{id: "s", act: true, pod: Pod{ID: "s", Partial: true}}, record(criMeta("9001:80", "")),
			base, planned{ask: askTask}},
		{"its task stopped: removed for good", snap{id: "s", act: true, pod: Pod{ID: "s", Partial: true}, known: known{epsKnown: true}},
			withFacts(record(criMeta("9001:80", "")), func(f *facts) { f.task.set(TaskStopped, nil) }), base,
			planned{remove: true, check: func(t *testing.T, p plan) {
				if !p.out.known.final {
					t.Errorf("known %+v: want final", p.out.known)
				}
			}}},
		{"its task runs: HCN's namespace is asked", snap{id: "s", act: true, pod: Pod{ID: "s", Partial: true}},
			withFacts(record(criMeta("9001:80", "")), func(f *facts) { f.task.set(TaskRunning, nil) }), base, planned{ask: askNamespace}},
		{"its namespace is gone: removed", snap{id: "s", act: true, pod: Pod{ID: "s", Partial: true}, known: known{epsKnown: true}},
			withFacts(record(criMeta("9001:80", "")), func(f *facts) { f.task.set(TaskRunning, nil); f.ns.set(false, nil) }), base,
			planned{remove: true}},
		{"an annotation with the pod's DNS: its endpoint created and attached, no other read", start, record(criMetaDNS("9001:80", "10.96.0.10")), base,
			planned{want: &wanted{netns: ns, policies: []hcn.PortMappingPolicy{p9001}, dns: podDNS}, steps: create(podDNS, p9001)}},
		{"the network not known yet: asked", start, withFacts(record(criMetaDNS("9001:80", "10.96.0.10")), func(f *facts) { f.target = fact[hcn.Target]{} }),
			base, planned{ask: askTarget}},
		{"a bad annotation in the record", start, record(criMeta("9001:80,9001:80", "")), base, planned{err: ErrInvalidPod}},
		{"nothing asked: what it has is removed", holdingOurs(ours), record(criMeta("", "")), base, planned{remove: true, steps: []hcn.Step{del(ours)}}},
		{"no Windows namespace: skipped, removed", start, withFacts(record(criMeta("9001:80", "")), func(f *facts) { f.record.v.NetNS = "" }), base,
			planned{remove: true, check: func(t *testing.T, p plan) {
				if len(p.out.skipped) != 1 || p.out.skipped[0] != SkipNoNetNS {
					t.Errorf("skipped %v", p.out.skipped)
				}
			}}},
		{"Hyper-V isolated: refused, what it has removed", holdingOurs(ours),
			withFacts(record(criMeta("9001:80", "")), func(f *facts) { f.record.v.HyperV = "SandboxIsolation HYPERVISOR" }),
			base, planned{remove: true, err: ErrHyperV, steps: []hcn.Step{del(ours)}}},
		{"admitted by its namespace's level", start, record(criMetaDNS("9001:80", "10.96.0.10")), admitting,
			planned{want: &wanted{netns: ns, policies: []hcn.PortMappingPolicy{p9001}, dns: podDNS}, steps: create(podDNS, p9001)}},
		{"refused by its namespace's level (the labels as of the sync)", start, record(criMetaDNS("9001:80", "10.96.0.10")), refusing,
			planned{err: admission.ErrPodSecurity}},
		{"held back: the labels were too old as the sync began", start, record(criMetaDNS("9001:80", "10.96.0.10")), stale,
			planned{err: admission.ErrLevelUnknown}},
		{"hostPorts: the namespace's other endpoints are asked", start, record(criMetaWith("", hostPort, "10.96.0.10")), base, planned{ask: askNeighbours}},
		{"no DNS in the record: the namespace's other endpoints are asked", start, record(criMeta("9001:80", "")), base, planned{ask: askNeighbours}},
		{"no DNS config, the CNI's in the record: no other read", start,
			record([]byte(`{"Version":"v1","Metadata":{"ID":"x","Config":{"metadata":{"name":"p","namespace":"ns"},"annotations":{"` +
				request.AnnotationPortMappings + `":"9001:80"}},"CNIResult":{"DNS":[{"nameservers":["10.244.0.2"],"domain":"cni.example"}]}}}`)), base,
			planned{want: &wanted{netns: ns, policies: []hcn.PortMappingPolicy{p9001}, dns: cniDNS}, steps: create(cniDNS, p9001)}},
		{"a pod that asks nothing, not started: no task read", snap{id: "s", act: true, pod: Pod{ID: "s", Partial: true}, known: known{epsKnown: true}},
			record(criMeta("", "")), base, planned{remove: true}},
		{"no DNS in the record: the CNI endpoint's", start,
			withFacts(record(criMeta("9001:80", "")), func(f *facts) { f.neighbours.set(cni(cniDNS), nil) }), base,
			planned{want: &wanted{netns: ns, policies: []hcn.PortMappingPolicy{p9001}, dns: cniDNS}, steps: create(cniDNS, p9001)}},
		// issue 44: the pod's own DNS is never replaced by the CNI's,
		// even where the CNI's endpoint is read (a pod with hostPorts)
		{"the pod's own DNS beside a CNI endpoint with other DNS", start,
			withFacts(record(criMetaWith("", hostPort, "10.96.0.10")), func(f *facts) { f.neighbours.set(cni(cniDNS), nil) }), base,
			planned{want: &wanted{netns: ns, policies: []hcn.PortMappingPolicy{p9001}, dns: podDNS}, steps: create(podDNS, p9001)}},
		{"the CNI maps a hostPort: its network's type is asked", start,
			withFacts(record(criMetaWith("", hostPort, "10.96.0.10")), func(f *facts) { f.neighbours.set(cni(cniDNS, 9001), nil) }), base,
			planned{ask: askNetworkTypes, check: func(t *testing.T, p plan) {
				if !reflect.DeepEqual(p.networks, []string{"B1"}) {
					t.Errorf("networks %v", p.networks)
				}
			}}},
		// issue 44: our endpoint is removed once the CNI maps everything
		// the pod asks (it would hold a host port nobody asks for)
		{"the CNI maps every hostPort: ours is removed", holdingOurs(ours),
			withFacts(record(criMetaWith("", hostPort, "10.96.0.10")), func(f *facts) {
				f.neighbours.set(cni(cniDNS, 9001), nil)
				f.netTypes.set(map[string]hcn.NetworkType{hcn.CanonicalGUID("B1"): hcn.NetworkL2Bridge}, nil)
			}), base,
			planned{remove: true, steps: []hcn.Step{del(ours)}, check: func(t *testing.T, p plan) {
				if len(p.out.known.cni) != 1 || p.out.mapped == nil || len(p.out.mapped.cni) != 1 {
					t.Errorf("known %+v mapped %+v: want the CNI's mapping known", p.out.known, p.out.mapped)
				}
			}}},
		// issue 51: the endpoint's fate is the plan's, step by step
		{"the endpoint in place is kept", holdingOurs(ours), record(criMetaDNS("9001:80", "10.96.0.10")), base,
			planned{want: &wanted{netns: ns, policies: []hcn.PortMappingPolicy{p9001}, dns: podDNS}, steps: []hcn.Step{{Kind: hcn.StepKeep, Endpoint: ours}}}},
		{"another mapping asked: the endpoint replaced", holdingOurs(ours), record(criMetaDNS("9002:80", "10.96.0.10")), base,
			planned{want: &wanted{netns: ns, policies: []hcn.PortMappingPolicy{p9002}, dns: podDNS}, steps: append([]hcn.Step{del(ours)}, create(podDNS, p9002)...)}},
		{"a duplicate HNS made late is deleted, the attached one kept", holdingOurs(late, ours), record(criMetaDNS("9001:80", "10.96.0.10")), base,
			planned{want: &wanted{netns: ns, policies: []hcn.PortMappingPolicy{p9001}, dns: podDNS}, steps: []hcn.Step{del(late), {Kind: hcn.StepKeep, Endpoint: ours}}}},
		{"an endpoint of ours detached behind our back is attached again, rolled back if that fails",
			holdingOurs(with(ours, func(ep *hcn.Endpoint) { ep.Namespace = "" })), record(criMetaDNS("9001:80", "10.96.0.10")), base,
			planned{want: &wanted{netns: ns, policies: []hcn.PortMappingPolicy{p9001}, dns: podDNS},
				steps: []hcn.Step{{Kind: hcn.StepAttach, Endpoint: with(ours, func(ep *hcn.Endpoint) { ep.Namespace = "" }), Namespace: ns, Rollback: true}}}},
		{"the network's gateway changed: the endpoint routed through the old one is replaced",
			holdingOurs(with(ours, func(ep *hcn.Endpoint) {
				ep.Routes = []hcn.Route{{DestinationPrefix: "0.0.0.0/0", NextHop: "172.29.0.1", Metric: 5000}}
			})),
			record(criMetaDNS("9001:80", "10.96.0.10")), base,
			planned{want: &wanted{netns: ns, policies: []hcn.PortMappingPolicy{p9001}, dns: podDNS},
				steps: append([]hcn.Step{del(with(ours, func(ep *hcn.Endpoint) {
					ep.Routes = []hcn.Route{{DestinationPrefix: "0.0.0.0/0", NextHop: "172.29.0.1", Metric: 5000}}
				}))}, create(podDNS, p9001)...)}},
		{"read back without its route, where HNS keeps routes: replaced", holdingOurs(with(ours, func(ep *hcn.Endpoint) { ep.Routes = nil })),
			withFacts(record(criMetaDNS("9001:80", "10.96.0.10")), func(f *facts) { f.target.v.RoutesStored = true }), base,
			planned{want: &wanted{netns: ns, policies: []hcn.PortMappingPolicy{p9001}, dns: podDNS},
				steps: append([]hcn.Step{del(with(ours, func(ep *hcn.Endpoint) { ep.Routes = nil }))}, create(podDNS, p9001)...)}},
		{"... where HNS has not been seen keeping them: kept", holdingOurs(with(ours, func(ep *hcn.Endpoint) { ep.Routes = nil })),
			record(criMetaDNS("9001:80", "10.96.0.10")), base,
			planned{want: &wanted{netns: ns, policies: []hcn.PortMappingPolicy{p9001}, dns: podDNS},
				steps: []hcn.Step{{Kind: hcn.StepKeep, Endpoint: with(ours, func(ep *hcn.Endpoint) { ep.Routes = nil })}}}},
		// issue 56: a port a program of the node holds is never mapped
		{"a new port: the node's sockets on it are asked", start, record(criMetaDNS("9001:80", "10.96.0.10")), sockets,
			planned{ask: askHostSockets, check: func(t *testing.T, p plan) {
				if !reflect.DeepEqual(p.ports, []hostsockets.Port{{Protocol: hcn.TCP, Port: 9001}}) {
					t.Errorf("ports %v: want 9001/tcp", p.ports)
				}
			}}},
		{"the network not known either: both read in one pass", start,
			withFacts(record(criMetaDNS("9001:80", "10.96.0.10")), func(f *facts) { f.target = fact[hcn.Target]{} }), sockets,
			planned{ask: askHostSockets | askTarget}},
		{"a pod holding its ports, the network not known: the network alone", holdingOurs(ours),
			withFacts(record(criMetaDNS("9001:80", "10.96.0.10")), func(f *facts) { f.target = fact[hcn.Target]{} }), sockets,
			planned{ask: askTarget}},
		{"a port a program holds: refused naming it, nothing built", start,
			withSockets(record(criMetaDNS("9001:80", "10.96.0.10")), sqlOn(9001), nil), sockets,
			planned{err: hostsockets.ErrHeld, check: func(t *testing.T, p plan) {
				var he *hostsockets.HeldError
				if !errors.As(p.err, &he) || he.By.Program != "sqlservr.exe" || he.Policy != p9001 || p.want != nil {
					t.Errorf("plan %+v: want 9001 refused naming sqlservr.exe", p)
				}
			}}},
		{"another port held, this one free: built", start, withSockets(record(criMetaDNS("9001:80", "10.96.0.10")), sqlOn(1433), nil), sockets,
			planned{want: &wanted{netns: ns, policies: []hcn.PortMappingPolicy{p9001}, dns: podDNS}, steps: create(podDNS, p9001)}},
		{"the sockets cannot be read: nothing built", start,
			withSockets(record(criMetaDNS("9001:80", "10.96.0.10")), nil, errUnread), sockets, planned{err: errUnread}},
		{"a port the pod holds already is not read again (a program bound after it was mapped)", holdingOurs(ours),
			record(criMetaDNS("9001:80", "10.96.0.10")), sockets,
			planned{want: &wanted{netns: ns, policies: []hcn.PortMappingPolicy{p9001}, dns: podDNS}, steps: []hcn.Step{{Kind: hcn.StepKeep, Endpoint: ours}}}},
		{"a refused pod keeps the endpoint mapping what it held, and gets nothing more", holdingOurs(ours),
			withSockets(record(criMetaDNS("9001:80,9002:80", "10.96.0.10")), sqlOn(9002), nil), sockets,
			planned{err: hostsockets.ErrHeld, check: func(t *testing.T, p plan) {
				if len(p.steps) != 0 || p.want != nil || p.remove {
					t.Errorf("plan %+v: want ours kept as it is (no step)", p)
				}
			}}},
		// issue 56: a range is one endpoint, built in one create
		{"a range: one create step with every port of it", start, record(criMetaDNS("20000-20999:20000-20999/udp", "10.96.0.10")), base,
			planned{want: &wanted{netns: ns, policies: rtp, dns: podDNS}, steps: create(podDNS, rtp...)}},
		// issue 51: late effects are steps too
		{"ports of a given-up create: HNS is asked what it made", unsure(start, now), record(criMetaDNS("9001:80", "10.96.0.10")), base,
			planned{ask: askEndpoints}},
		{"... and the late endpoint is taken", unsure(start, now),
			withFacts(record(criMetaDNS("9001:80", "10.96.0.10")), func(f *facts) { f.endpoints.set([]hcn.Endpoint{late}, nil) }), base,
			planned{want: &wanted{netns: ns, policies: []hcn.PortMappingPolicy{p9001}, dns: podDNS},
				steps: []hcn.Step{{Kind: hcn.StepAttach, Endpoint: late, Namespace: ns, Rollback: true}}}},
		{"a refused pod's late endpoint is deleted", unsure(start, now),
			withFacts(record(criMetaDNS("9001:80", "10.96.0.10")), func(f *facts) { f.endpoints.set([]hcn.Endpoint{late}, nil) }), refusing,
			planned{err: admission.ErrPodSecurity, steps: []hcn.Step{del(late)}, check: func(t *testing.T, p plan) {
				if len(p.unsure) != 0 {
					t.Errorf("unsure %v after the late endpoint was found: want none", p.unsure)
				}
			}}},
		{"a stopped pod whose given-up create has not landed keeps its ports held", unsure(snap{id: "s", act: true, stopped: true, sandbox: true}, now),
			withFacts(facts{}, func(f *facts) { f.endpoints.set(nil, nil) }), base,
			planned{remove: true, check: func(t *testing.T, p plan) {
				if !slices.Equal(p.unsure, []hcn.PortMappingPolicy{p9001}) {
					t.Errorf("unsure %v: want 9001 held while the create may land", p.unsure)
				}
			}}},
		{"... until the bound has passed", unsure(snap{id: "s", act: true, stopped: true, sandbox: true}, now.Add(-20*time.Second)),
			withFacts(facts{}, func(f *facts) { f.endpoints.set(nil, nil) }), base,
			planned{remove: true, check: func(t *testing.T, p plan) {
				if len(p.unsure) != 0 {
					t.Errorf("unsure %v: want the ports given back", p.unsure)
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
			if tc.want.steps != nil && !reflect.DeepEqual(p.steps, tc.want.steps) {
				t.Errorf("steps %v, want %v", p.steps, tc.want.steps)
			}
			if tc.want.check != nil {
				tc.want.check(t, p)
			}
		})
	}
}

// TestAPodIsJudgedOnceASync: decide judges the pod (its request, its
// admission, the endpoint it wants) on the pass that reads its record;
// the passes after it, which read the build's facts (the node's sockets,
// the network), build from that judgement and do not judge it again.
func TestAPodIsJudgedOnceASync(t *testing.T) {
	const ns hcn.GUID = "8F6A9B2C-1D3E-4F50-8A6B-7C8D9E0F1A2B"
	pol, err := admission.Compile(testAdmission())
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	in := inputs{now: now, policy: pol, sources: request.Sources{Annotations: true}, hostSockets: true,
		labels: &admission.Labels{Enforce: map[string]admission.Label{"ns": {Value: "privileged", Labelled: true}}, Heard: now, MaxAge: time.Minute, At: now}}
	sn := snap{id: "s", act: true, started: true, pod: Pod{ID: "s", Partial: true}, known: known{epsKnown: true}}
	resolved := func(annotation string) fact[request.Request] {
		var r fact[request.Request]
		r.set(request.Resolve(request.Ask{Pod: Pod{ID: "s", Partial: true}, Sources: in.sources,
			Metadata: criMetaDNS(annotation, "10.96.0.10")}))
		return r
	}
	var f facts
	f.record.set(&SandboxInfo{ID: "s", IsSandbox: true, NetNS: ns}, nil)
	f.request = resolved("9001:80")

	first := decide(sn, f, in)
	if first.ask != askHostSockets|askTarget || first.judged == nil {
		t.Fatalf("first pass asks %v, judged %v; want the node's sockets and the network, the pod judged", first.ask, first.judged)
	}
	f.judged = first.judged
	f.sockets.set(nil, nil)
	f.target.set(hcn.Target{NetworkID: "N1", Prefix: "nri-hcn-portmap-"}, nil)
	f.request = resolved("9002:80") // were the pod judged again, it would want this
	last := decide(sn, f, in)
	if last.ask != decided || last.want == nil || len(last.want.policies) != 1 || last.want.policies[0].ExternalPort != 9001 {
		t.Fatalf("last pass: %+v; want the build of the judged endpoint (9001)", last)
	}
}
