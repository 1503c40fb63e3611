package doctor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/config"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn/hcnsim"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/admin"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/containerd"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/hostsockets"
)

var ctx = context.Background()

type fakeContainerd struct {
	err       error
	sandboxes map[string]*plugin.SandboxInfo
}

func (f *fakeContainerd) Version(context.Context) (string, error) { return "v2.4.2", f.err }
func (f *fakeContainerd) ListSandboxes(context.Context) ([]string, error) {
	var ids []string
	for id := range f.sandboxes {
		ids = append(ids, id)
	}
	return ids, f.err
}
func (f *fakeContainerd) Sandbox(_ context.Context, id string) (*plugin.SandboxInfo, error) {
	return f.sandboxes[id], f.err
}

// healthy is a node where every check passes: HNS with the NAT network,
// containerd, a running plugin with a live event source, the NRI socket.
func healthy(t *testing.T) (*Doctor, *hcnsim.Sim) {
	t.Helper()
	sim := hcnsim.New()
	if _, err := sim.CreateNetwork(ctx, hcn.NetworkSpec{Name: "nat", Type: hcn.NetworkNAT, Subnet: "172.30.0.0/16", Gateway: "172.30.0.1"}); err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	cfg.Kubernetes.Enabled = true // the namespaces' Pod Security levels are read
	return &Doctor{
		Config:     cfg,
		HNS:        sim,
		Containerd: &fakeContainerd{sandboxes: map[string]*plugin.SandboxInfo{"sb1": {ID: "sb1"}}},
		Health: func(context.Context) (admin.HealthReport, error) {
			return admin.HealthReport{Status: "ok", Checks: map[string]string{"event source": "ok"}}, nil
		},
		Stat:    func(string) error { return nil },
		Listen:  func(string) error { return nil },
		Sockets: sockets{},
		// the host: a NIC, and its vNIC on the NAT network (the subnet
		// itself, which overlaps nothing)
		HostPrefixes: func() ([]netip.Prefix, error) {
			return []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24"), netip.MustParsePrefix("172.30.0.0/16")}, nil
		},
	}, sim
}

func TestChecks(t *testing.T) {
	notRunning := func(context.Context) (admin.HealthReport, error) { return admin.HealthReport{}, ErrNotRunning }
	tests := []struct {
		name   string
		mutate func(*Doctor, *hcnsim.Sim)
		check  string
		want   Status
		detail string // in the row's detail
		fix    string // in the row's fix
	}{
		{"healthy node", func(*Doctor, *hcnsim.Sim) {}, "network nat", Pass, "type NAT, subnets 172.30.0.0/16, gateway 172.30.0.1", ""},
		{"HNS version", func(*Doctor, *hcnsim.Sim) {}, "HNS", Pass, "version " + hcnsim.SimVersion, ""},
		{"HNS unreachable", func(d *Doctor, _ *hcnsim.Sim) { d.HNSErr = errors.New("HNS v2 API not supported") }, "HNS", Fail, "not supported", "Start-Service hns"},
		{"network missing", func(d *Doctor, _ *hcnsim.Sim) { d.Config.HCN.Network, d.Config.HCN.CreateNetwork = "pods", false },
			"network pods", Fail, "does not exist", "hcn.create_network"},
		{"network created later", func(d *Doctor, _ *hcnsim.Sim) { d.Config.HCN.Network = "pods"; d.Config.HCN.CreateNetwork = true }, "network pods", Warn, "the plugin creates it when it starts", ""},
		{"network without gateway", func(d *Doctor, s *hcnsim.Sim) {
			_, _ = s.CreateNetwork(ctx, hcn.NetworkSpec{Name: "l2", Type: hcn.NetworkL2Bridge, Subnet: "10.1.0.0/24"})
			d.Config.HCN.Network, d.Config.HCN.AllowCNINetwork = "l2", true
		}, "network l2", Fail, "no gateway", "hcn.gateway"},
		{"a CNI's network, no consent", func(d *Doctor, s *hcnsim.Sim) {
			_, _ = s.CreateNetwork(ctx, hcn.NetworkSpec{Name: "l2", Type: hcn.NetworkL2Bridge, Subnet: "10.1.0.0/24", Gateway: "10.1.0.1"})
			d.Config.HCN.Network = "l2"
		}, "network l2", Fail, "not NAT", "hcn.allow_cni_network"},
		{"network without gateway, route none", func(d *Doctor, s *hcnsim.Sim) {
			_, _ = s.CreateNetwork(ctx, hcn.NetworkSpec{Name: "l2", Type: hcn.NetworkL2Bridge, Subnet: "10.1.0.0/24"})
			d.Config.HCN.Network, d.Config.HCN.DefaultRoute, d.Config.HCN.AllowCNINetwork = "l2", "none", true
		}, "network l2", Pass, "gateway (none)", ""},
		// issue 53: what the plugin refuses to start on, doctor fails
		{"NAT subnet in a cluster range", func(d *Doctor, _ *hcnsim.Sim) { d.Config.HCN.ClusterRanges = []string{"10.96.0.0/12", "172.30.0.0/16"} },
			"network nat", Fail, "172.30.0.0/16 overlaps the cluster's range 172.30.0.0/16", "hcn.allow_subnet_overlap"},
		{"NAT subnet over a CNI network", func(_ *Doctor, s *hcnsim.Sim) {
			_, _ = s.CreateNetwork(ctx, hcn.NetworkSpec{Name: "cbr0", Type: hcn.NetworkL2Bridge, Subnet: "172.30.8.0/24"})
		}, "network nat", Fail, "172.30.0.0/16 overlaps 172.30.8.0/24 of HNS network cbr0", "hcn.cluster_ranges"},
		{"NAT subnet over the host's address", func(d *Doctor, _ *hcnsim.Sim) {
			d.HostPrefixes = func() ([]netip.Prefix, error) { return []netip.Prefix{netip.MustParsePrefix("172.30.64.0/18")}, nil }
		}, "network nat", Fail, "172.30.0.0/16 overlaps the host's address 172.30.64.0/18", "hcn.subnet"},
		{"NAT subnet overlapping, allowed", func(d *Doctor, _ *hcnsim.Sim) {
			d.Config.HCN.ClusterRanges, d.Config.HCN.AllowSubnetOverlap = []string{"172.30.0.0/16"}, true
		}, "network nat", Warn, "overlaps the cluster's range", "hcn.allow_subnet_overlap = true takes it"},
		{"NAT subnet clear", func(d *Doctor, _ *hcnsim.Sim) { d.Config.HCN.ClusterRanges = []string{"10.96.0.0/12", "10.244.0.0/16"} },
			"network nat", Pass, "type NAT, subnets 172.30.0.0/16", ""},
		{"NAT read back as nat", func(_ *Doctor, s *hcnsim.Sim) { s.SetRules(hcnsim.Rules{TypeSpelling: "lower"}) }, "network nat", Pass, "type nat, subnets", ""},
		{"NAT read back as Nat", func(_ *Doctor, s *hcnsim.Sim) { s.SetRules(hcnsim.Rules{TypeSpelling: "title"}) }, "network nat", Pass, "type Nat, subnets", ""},
		{"dual stack on a nat", func(d *Doctor, s *hcnsim.Sim) {
			s.SetRules(hcnsim.Rules{TypeSpelling: "lower"})
			d.Config.HCN.DualStack = true
		}, "IPv6", Fail, "NAT, which does not support IPv6", "L2Bridge"},
		{"IPv4 only", func(*Doctor, *hcnsim.Sim) {}, "IPv6", Pass, "dual_stack off", ""},
		{"dual stack on NAT", func(d *Doctor, _ *hcnsim.Sim) { d.Config.HCN.DualStack = true }, "IPv6", Fail, "NAT, which does not support IPv6", "L2Bridge"},
		{"containerd", func(*Doctor, *hcnsim.Sim) {}, "containerd", Pass, "v2.4.2 at ", ""},
		{"containerd down", func(d *Doctor, _ *hcnsim.Sim) { d.Containerd = &fakeContainerd{err: errors.New("connection refused")} }, "containerd", Fail, "connection refused", "containerd.address"},
		{"events live", func(*Doctor, *hcnsim.Sim) {}, "event subscription", Pass, "live", ""},
		{"plugin not running", func(d *Doctor, _ *hcnsim.Sim) { d.Health = notRunning }, "event subscription", Warn, "not running", "Start-Service"},
		{"events down", func(d *Doctor, _ *hcnsim.Sim) {
			d.Health = func(context.Context) (admin.HealthReport, error) {
				return admin.HealthReport{Status: "unhealthy", Checks: map[string]string{"event source": "containerd events: subscription lost"}}, nil
			}
		}, "event subscription", Fail, "subscription lost", "log"},
		{"NRI socket", func(*Doctor, *hcnsim.Sim) {}, "NRI socket", Pass, "present", ""},
		{"NRI socket absent, auto", func(d *Doctor, _ *hcnsim.Sim) { d.Stat = func(string) error { return errors.New("no such file") } }, "NRI socket", Warn, "containerd's events", ""},
		{"NRI socket absent, nri", func(d *Doctor, _ *hcnsim.Sim) {
			d.Stat = func(string) error { return errors.New("no such file") }
			d.Config.Plugin.Source = config.SourceNRI
		}, "NRI socket", Fail, "no such file", "io.containerd.nri.v1.nri"},
		{"Windows", func(d *Doctor, _ *hcnsim.Sim) { d.Windows = true; d.Stat = nil }, "NRI socket", Pass, "containerd's events", ""},
		{"Windows with source nri", func(d *Doctor, _ *hcnsim.Sim) { d.Windows = true; d.Config.Plugin.Source = config.SourceNRI }, "NRI socket", Fail, "opens no NRI socket", "plugin.source"},
		{"admin served by the plugin", func(*Doctor, *hcnsim.Sim) {}, "admin address", Pass, "served by the running plugin", ""},
		{"admin free", func(d *Doctor, _ *hcnsim.Sim) { d.Health = notRunning }, "admin address", Pass, "free", ""},
		{"admin taken", func(d *Doctor, _ *hcnsim.Sim) {
			d.Health = notRunning
			d.Listen = func(string) error { return errors.New("address already in use") }
		}, "admin address", Fail, "taken by another program", "admin.listen"},
		{"admin port excluded (issue 53)", func(d *Doctor, _ *hcnsim.Sim) {
			d.Health = notRunning
			d.Listen = func(string) error {
				return fmt.Errorf("%w: port 9466, and no program holds it", admin.ErrPortForbidden)
			}
		}, "admin address", Fail, "cannot be bound", "outside the node's excluded ranges"},
		{"no Hyper-V pods", func(*Doctor, *hcnsim.Sim) {}, "Hyper-V pods", Pass, "none among 1 sandboxes", ""},
		{"Hyper-V pods", func(d *Doctor, _ *hcnsim.Sim) {
			d.Containerd = &fakeContainerd{sandboxes: map[string]*plugin.SandboxInfo{"vm1": {ID: "vm1", HyperV: "runhcs options: HYPERVISOR"}}}
		}, "Hyper-V pods", Warn, "1 of 1 sandboxes are Hyper-V isolated (vm1)", "portMappings"},
		{"a Hyper-V handler reaching ncproxy, served", func(d *Doctor, _ *hcnsim.Sim) {
			d.Config.HyperV = config.HyperV{NodeNetworkService: "127.0.0.1:6668", NCProxy: "127.0.0.1:6669"}
			d.RuntimeHandlers = handlers(containerd.RuntimeHandler{Name: "runhcs-wcow-process"},
				containerd.RuntimeHandler{Name: "wcow-vm", HyperV: true, NCProxy: `\\.\pipe\ncproxy-ttrpc`})
		}, "Hyper-V pods", Pass, `handler wcow-vm: Hyper-V, its network set up through ncproxy (\\.\pipe\ncproxy-ttrpc): host ports mapped`, ""},
		{"a Hyper-V handler reaching ncproxy, not served", func(d *Doctor, _ *hcnsim.Sim) {
			d.RuntimeHandlers = handlers(containerd.RuntimeHandler{Name: "wcow-vm", HyperV: true, NCProxy: "x"})
		}, "Hyper-V pods", Warn, "handler wcow-vm: Hyper-V, through ncproxy (x), but this plugin does not serve its NodeNetworkService", "hyperv.node_network_service"},
		{"a handler listed as Hyper-V without ncproxy, served", func(d *Doctor, _ *hcnsim.Sim) {
			d.Config.HyperV = config.HyperV{NodeNetworkService: "127.0.0.1:6668", NCProxy: "127.0.0.1:6669"}
			d.RuntimeHandlers = handlers(containerd.RuntimeHandler{Name: "runhcs-wcow-hypervisor"})
		}, "Hyper-V pods", Warn, "handler runhcs-wcow-hypervisor: Hyper-V, no NCProxyAddr in its options: host ports refused", "set NCProxyAddr"},
		{"containerd's configuration unreadable", func(d *Doctor, _ *hcnsim.Sim) {
			d.RuntimeHandlers = func() ([]containerd.RuntimeHandler, error) { return nil, errors.New("config.toml: bad") }
		}, "Hyper-V pods", Warn, "containerd's runtime handlers not read: config.toml: bad", ""},
		{"Hyper-V sandboxes, served", func(d *Doctor, _ *hcnsim.Sim) {
			d.Config.HyperV = config.HyperV{NodeNetworkService: "127.0.0.1:6668", NCProxy: "127.0.0.1:6669"}
			d.Containerd = &fakeContainerd{sandboxes: map[string]*plugin.SandboxInfo{"vm1": {ID: "vm1", HyperV: "runhcs options: HYPERVISOR"}}}
		}, "Hyper-V pods", Pass, "1 of 1 sandboxes are Hyper-V isolated (vm1): mapped where ncproxy set their network up", ""},
		{"Pod Security enforced", func(*Doctor, *hcnsim.Sim) {}, "Pod Security", Pass, "an unlabelled namespace counts as baseline", ""},
		{"node restriction held", func(d *Doctor, _ *hcnsim.Sim) {
			d.NodeRestriction = func(context.Context) (bool, error) { return true, nil }
		},
			"Node restriction", Pass, "holds the plugin's token to this node's pods", ""},
		{"node restriction absent", func(d *Doctor, _ *hcnsim.Sim) {
			d.NodeRestriction = func(context.Context) (bool, error) { return false, nil }
		},
			"Node restriction", Warn, "may write the condition and events of every node's pods", "admissionPolicies.nodeRestriction=true"},
		{"node restriction unknown", func(d *Doctor, _ *hcnsim.Sim) {
			d.NodeRestriction = func(context.Context) (bool, error) { return false, errors.New("connection refused") }
		}, "Node restriction", Warn, "cannot tell", ""},
		{"Pod Security with a privileged default", func(d *Doctor, _ *hcnsim.Sim) { d.Config.Admission.PodSecurityDefaultLevel = config.LevelPrivileged },
			"Pod Security", Warn, "an unlabelled namespace counts as privileged", "defaults.enforce"},
		{"Pod Security off", func(d *Doctor, _ *hcnsim.Sim) { d.Config.Admission.PodSecurity = config.PodSecurityOff }, "Pod Security", Warn, "not checked", "another policy engine"},
		{"Pod Security without the API server (NetworkPolicy off)", func(d *Doctor, _ *hcnsim.Sim) {
			d.Config.Kubernetes.Enabled, d.Config.Admission.NetworkPolicy = false, config.NetworkPolicyOff
		}, "Pod Security", Warn, "hostPort is mapped; every pod's port-mappings annotation is refused", "kubeconfig = "},
		{"no annotations", func(d *Doctor, _ *hcnsim.Sim) {
			d.Config.Kubernetes.Enabled, d.Config.Plugin.MappingSources, d.Config.Admission.NetworkPolicy = false, []string{config.MappingsCRI}, config.NetworkPolicyOff
		}, "Pod Security", Pass, "not a mapping source", ""},
		// issue 52
		{"NetworkPolicy checked, no other kind served", func(d *Doctor, _ *hcnsim.Sim) {
			d.PolicyKinds = func(context.Context) ([]string, error) { return nil, nil }
		}, "NetworkPolicy", Pass, "only where the Kubernetes NetworkPolicies selecting the pod admit every source", ""},
		{"NetworkPolicy checked, another kind served", func(d *Doctor, _ *hcnsim.Sim) {
			d.PolicyKinds = func(context.Context) ([]string, error) { return []string{"crd.antrea.io/clusternetworkpolicies"}, nil }
		}, "NetworkPolicy", Fail, "serves crd.antrea.io/clusternetworkpolicies", `"kubernetes-only"`},
		{"NetworkPolicy, the kinds not known", func(d *Doctor, _ *hcnsim.Sim) {
			d.PolicyKinds = func(context.Context) ([]string, error) { return nil, errors.New("connection refused") }
		}, "NetworkPolicy", Warn, "cannot tell", ""},
		{"NetworkPolicy kubernetes-only", func(d *Doctor, _ *hcnsim.Sim) {
			d.Config.Admission.NetworkPolicy = config.NetworkPolicyKubernetesOnly
			d.PolicyKinds = func(context.Context) ([]string, error) { return []string{"crd.antrea.io/clusternetworkpolicies"}, nil }
		}, "NetworkPolicy", Pass, "the operator says none selects", ""},
		{"NetworkPolicy off: said in the words run says", func(d *Doctor, _ *hcnsim.Sim) { d.Config.Admission.NetworkPolicy = config.NetworkPolicyOff },
			"NetworkPolicy", Warn, config.NetworkPolicyOffSays, `"kubernetes"`},
		// issue 56: what the Windows build means for a pod reaching its own node's host port
		{"node-local on Linux", func(*Doctor, *hcnsim.Sim) {}, "node-local host ports", Pass, "not a Windows node", ""},
		{"node-local on Server 2019", func(d *Doctor, _ *hcnsim.Sim) { d.OSBuild = func() (uint32, error) { return 17763, nil } },
			"node-local host ports", Warn, "Windows Server 2019 (build 17763) lacks the OS half", "internalTrafficPolicy: Local"},
		{"node-local on Server 2022", func(d *Doctor, _ *hcnsim.Sim) { d.OSBuild = func() (uint32, error) { return 20348, nil } },
			"node-local host ports", Pass, "Windows build 20348: a pod may reach its own node's hostIP:hostPort", ""},
		{"node-local on Server 2025", func(d *Doctor, _ *hcnsim.Sim) { d.OSBuild = func() (uint32, error) { return 26100, nil } },
			"node-local host ports", Pass, "127.0.0.1:hostPort is no path to a pod", ""},
		{"node-local build unread", func(d *Doctor, _ *hcnsim.Sim) { d.OSBuild = func() (uint32, error) { return 0, errors.New("no") } },
			"node-local host ports", Warn, "not checked", ""},
		{"NetworkPolicy without the API server (a default service install)", func(d *Doctor, _ *hcnsim.Sim) { d.Config.Kubernetes.Enabled = false },
			"NetworkPolicy", Fail, "no host port is mapped", `admission.network_policy = "off"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d, sim := healthy(t)
			tc.mutate(d, sim)
			rep := d.Run(ctx)
			var row *Result
			for i := range rep.Results {
				if rep.Results[i].Check == tc.check {
					row = &rep.Results[i]
				}
			}
			if row == nil {
				t.Fatalf("no check %q in %+v", tc.check, rep.Results)
			}
			if row.Status != tc.want || !strings.Contains(row.Detail, tc.detail) || !strings.Contains(row.Fix, tc.fix) || (tc.want != Pass) != (row.Fix != "" || tc.want == Warn) {
				t.Errorf("%s = %+v; want %s with detail ~%q, fix ~%q", tc.check, *row, tc.want, tc.detail, tc.fix)
			}
			if rep.Fit() != (tc.want != Fail) {
				t.Errorf("Fit = %v with %+v", rep.Fit(), rep.Results)
			}
			if len(sim.State().Endpoints) != 0 {
				t.Errorf("a check created an endpoint")
			}
		})
	}
}

// sockets is the node's own sockets as a test sets them.
type sockets []hostsockets.Socket

func (s sockets) On(_ context.Context, ports []hostsockets.Port) ([]hostsockets.Socket, error) {
	var out []hostsockets.Socket
	for _, x := range s {
		if slices.Contains(ports, hostsockets.Port{Protocol: x.Protocol, Port: x.Port}) {
			out = append(out, x)
		}
	}
	return out, nil
}

// Issue 56: a program that binds a host port after one of the plugin's
// endpoints mapped it is shadowed by the mapping; doctor says which, and
// whose endpoint. A port the CNI's endpoint maps is not the plugin's to
// report.
func TestDoctorSaysWhichProgramAMappingShadows(t *testing.T) {
	d, sim := healthy(t)
	net, err := sim.GetNetworkByName(ctx, "nat")
	if err != nil {
		t.Fatal(err)
	}
	for _, spec := range []hcn.EndpointSpec{
		{Name: config.EndpointPrefix + "sb1", NetworkID: net.ID, PortMappings: []hcn.PortMappingPolicy{{Protocol: hcn.TCP, ExternalPort: 1433, InternalPort: 1433}}},
		{Name: "cbr0_sb2", NetworkID: net.ID, PortMappings: []hcn.PortMappingPolicy{{Protocol: hcn.TCP, ExternalPort: 8080, InternalPort: 80}}},
	} {
		if _, err := sim.CreateEndpoint(ctx, spec); err != nil {
			t.Fatal(err)
		}
	}
	sql := hostsockets.Socket{Protocol: hcn.TCP, Addr: netip.MustParseAddr("0.0.0.0"), Port: 1433, PID: 2100, Program: "sqlservr.exe"}
	iis := hostsockets.Socket{Protocol: hcn.TCP, Addr: netip.MustParseAddr("::"), Port: 8080, PID: 4, Program: "System"}
	for _, tc := range []struct {
		name    string
		sockets hostsockets.Reader
		want    Status
		says    string
	}{
		{"a program on a port the plugin maps", sockets{sql, iis}, Warn,
			"*:1433->1433/tcp of nri-hcn-portmap-sb1 shadows sqlservr.exe (PID 2100) listening on 0.0.0.0:1433/tcp"},
		{"only the CNI's port held", sockets{iis}, Pass, "none of the 1 host ports"},
		{"not read", nil, Warn, "not checked"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d.Sockets = tc.sockets
			st, says := statusOf(d.Run(ctx), "host ports shadowed")
			if st != tc.want || !strings.Contains(says, tc.says) || (tc.want == Pass && strings.Contains(says, "8080")) {
				t.Fatalf("host ports shadowed = %s %q; want %s saying %q", st, says, tc.want, tc.says)
			}
		})
	}
}

// nothingLeft fails when HNS holds any endpoint or namespace.
func nothingLeft(t *testing.T, sim *hcnsim.Sim) {
	t.Helper()
	if st := sim.State(); len(st.Endpoints) != 0 || len(st.Namespaces) != 0 {
		t.Errorf("the self-test left %+v %+v", st.Endpoints, st.Namespaces)
	}
}

func statusOf(rep Report, check string) (Status, string) {
	for _, r := range rep.Results {
		if r.Check == check {
			return r.Status, r.Detail + " | " + r.Fix
		}
	}
	return "", ""
}

// TestSelfTest passes on HNS as modelled, under every variant of its
// unverified rules, and leaves nothing behind.
func TestSelfTest(t *testing.T) {
	for _, rules := range hcnsim.AllRules() {
		t.Run(rules.String(), func(t *testing.T) {
			d, sim := healthy(t)
			sim.SetRules(rules)
			rep := d.SelfTest(ctx, SelfTestOptions{HostPort: 47999})
			if !rep.Fit() {
				t.Fatalf("self-test failed: %+v", rep.Results)
			}
			for _, check := range []string{"selftest: namespace", "selftest: endpoint", "selftest: read back", "selftest: cleanup"} {
				if st, detail := statusOf(rep, check); st != Pass {
					t.Errorf("%s = %s %s", check, st, detail)
				}
			}
			if _, detail := statusOf(rep, "selftest: read back"); !strings.Contains(detail, "metric 5000") {
				t.Errorf("read back does not name the route: %s", detail)
			}
			nothingLeft(t, sim)
		})
	}
}

// forgetful is an HNS that does not keep an endpoint's routes: the
// self-test must see it.
type forgetful struct{ *hcnsim.Sim }

func (f forgetful) ListEndpointsByName(ctx context.Context, name string) ([]hcn.Endpoint, error) {
	eps, err := f.Sim.ListEndpointsByName(ctx, name)
	for i := range eps {
		eps[i].Routes = nil
	}
	return eps, err
}

func TestSelfTestFindsWhatHNSDoesNotKeep(t *testing.T) {
	d, sim := healthy(t)
	d.HNS = forgetful{sim}
	rep := d.SelfTest(ctx, SelfTestOptions{HostPort: 47999})
	st, detail := statusOf(rep, "selftest: read back")
	// an HNS that stores no routes is a known older build: a warning that
	// names them and what it means, not a failure of the self-test
	if st != Warn || !strings.Contains(detail, "routes: sent [0.0.0.0/0 via 172.30.0.1 metric 5000], HNS has []") ||
		!strings.Contains(detail, "hcn.default_route cannot take effect") {
		t.Fatalf("read back = %s %s; want a warning naming the routes", st, detail)
	}
	nothingLeft(t, sim)
}

func TestSelfTestPortTaken(t *testing.T) {
	d, sim := healthy(t)
	n, _ := sim.GetNetworkByName(ctx, "nat")
	holder, err := sim.CreateEndpoint(ctx, hcn.EndpointSpec{Name: "host-service", NetworkID: n.ID,
		PortMappings: []hcn.PortMappingPolicy{{Protocol: hcn.TCP, ExternalPort: 47999, InternalPort: 80}}})
	if err != nil {
		t.Fatal(err)
	}
	rep := d.SelfTest(ctx, SelfTestOptions{HostPort: 47999})
	if st, detail := statusOf(rep, "selftest: endpoint"); st != Fail || !strings.Contains(detail, "host port 47999 is taken") {
		t.Fatalf("endpoint = %s %s", st, detail)
	}
	if st, _ := statusOf(rep, "selftest: cleanup"); st != Pass {
		t.Errorf("cleanup = %s", st)
	}
	if st := sim.State(); len(st.Endpoints) != 1 || st.Endpoints[0].ID != holder.ID || len(st.Namespaces) != 0 {
		t.Errorf("after the failed self-test: %+v", st)
	}
}

// TestSelfTestKeepThenNextRunRemoves: --keep leaves both objects, and the
// next self-test removes them first.
func TestSelfTestKeepThenNextRunRemoves(t *testing.T) {
	d, sim := healthy(t)
	rep := d.SelfTest(ctx, SelfTestOptions{HostPort: 47999, Keep: true})
	if st, _ := statusOf(rep, "selftest: cleanup"); st != Warn || !rep.Fit() {
		t.Fatalf("kept run: %+v", rep.Results)
	}
	if st := sim.State(); len(st.Endpoints) != 1 || len(st.Namespaces) != 1 {
		t.Fatalf("kept: %+v", st)
	}
	rep = d.SelfTest(ctx, SelfTestOptions{HostPort: 47999})
	if st, detail := statusOf(rep, "selftest: leftovers"); st != Pass || !strings.Contains(detail, "removed 1") {
		t.Fatalf("leftovers = %s %s", st, detail)
	}
	if !rep.Fit() {
		t.Fatalf("second run: %+v", rep.Results)
	}
	nothingLeft(t, sim)
}

func TestWrite(t *testing.T) {
	rep := Report{Results: []Result{{"HNS", Pass, "v2 API, version 15.1", ""}, {"network pods", Fail, "does not exist", "create it"}}}
	var b bytes.Buffer
	if err := Write(&b, rep, "table"); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"CHECK", "network pods  FAIL", "fix: create it", "NOT fit"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
	b.Reset()
	if err := Write(&b, rep, "json"); err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(b.Bytes(), &back); err != nil || len(back.Results) != 2 || back.Results[1].Status != Fail {
		t.Errorf("json = %s (%v)", b.String(), err)
	}
}

// TestSelfTestCreatesTheNetworkAsThePluginWould: with hcn.create_network
// the self-test builds the network the plugin would; without it, a missing
// network fails the self-test before anything is created.
func TestSelfTestCreatesTheNetworkAsThePluginWould(t *testing.T) {
	d, sim := healthy(t)
	d.Config.HCN.Network, d.Config.HCN.CreateNetwork = "pods", false
	rep := d.SelfTest(ctx, SelfTestOptions{HostPort: 47999})
	if st, detail := statusOf(rep, "selftest"); st != Fail || !strings.Contains(detail, "network pods") {
		t.Fatalf("missing network: %s %s", st, detail)
	}
	nothingLeft(t, sim)
	d.Config.HCN.CreateNetwork, d.Config.HCN.Subnet, d.Config.HCN.Gateway = true, "10.50.0.0/24", "10.50.0.1"
	if rep := d.SelfTest(ctx, SelfTestOptions{HostPort: 47999}); !rep.Fit() {
		t.Fatalf("with create_network: %+v", rep.Results)
	}
	if n, err := sim.GetNetworkByName(ctx, "pods"); err != nil || n.Gateway != "10.50.0.1" {
		t.Errorf("network pods = %+v, %v", n, err)
	}
}

// TestRunAsksOnce: one Run asks HNS for the network and the plugin for its
// health once, though several checks use each.
func TestRunAsksOnce(t *testing.T) {
	d, sim := healthy(t)
	d.Config.HCN.DualStack = true // the IPv6 check reads the network too
	healthCalls := 0
	d.Health = func(context.Context) (admin.HealthReport, error) {
		healthCalls++
		return admin.HealthReport{Status: "ok", Checks: map[string]string{"event source": "ok"}}, nil
	}
	before := sim.Calls()[hcnsim.OpGetNetworkByName]
	d.Run(ctx)
	if n := sim.Calls()[hcnsim.OpGetNetworkByName] - before; n != 1 || healthCalls != 1 {
		t.Errorf("network asked %d times, health %d times; want once each", n, healthCalls)
	}
}

// The same through the simulator's rule: an HNS that does not store routes
// warns, and the self-test still cleans up.
func TestSelfTestOnAnHNSThatStoresNoRoutes(t *testing.T) {
	d, sim := healthy(t)
	sim.SetRules(hcnsim.Rules{DropRoutes: true})
	rep := d.SelfTest(ctx, SelfTestOptions{HostPort: 47996})
	if st, detail := statusOf(rep, "selftest: read back"); st != Warn || !strings.Contains(detail, "does not store endpoint routes") {
		t.Fatalf("read back = %s %s", st, detail)
	}
	nothingLeft(t, sim)
}

// handlers is containerd's configuration naming hs.
func handlers(hs ...containerd.RuntimeHandler) func() ([]containerd.RuntimeHandler, error) {
	return func() ([]containerd.RuntimeHandler, error) { return hs, nil }
}
