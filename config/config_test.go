package config

import (
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/test/testfs"
)

func write(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(testfs.TempDir(t), "config.toml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoadFull(t *testing.T) {
	p := write(t, `
[plugin]
source = "containerd"
resync_interval = "30s"
mapping_sources = ["annotations", "cri"]
failure_policy = "fail-closed"
deadline = "1s"
max_mappings_per_pod = 16
max_annotation_bytes = 4096
shutdown_grace = "2s"
hyperv_runtime_handlers = ["runhcs-wcow-hypervisor", "wcow-vm"]

[admission]
namespaces = ["ingress", "kube-system"]
pod_selector = "hostports=allowed"
host_port_ranges = ["80", "443", "30000-32767"]
host_ips = ["10.0.0.0/24"]
deny = []
pod_security = "enforce"
pod_security_default_level = "baseline"
pod_security_exempt_namespaces = ["kube-system"]
network_policy = "kubernetes-only"

[nri]
socket = "/run/nri/nri.sock"
plugin_name = "portmap"
plugin_index = "10"
reconnect_max = "5s"

[containerd]
address = "/run/containerd/containerd.sock"
namespace = "k8s.io"

[hcn]
backend = "simulated"
simulator_address = "unix:///tmp/sim.sock"
network = "pods"
create_network = true
allow_cni_network = true
network_type = "L2Bridge"
subnet = "10.244.0.0/24"
cluster_ranges = ["10.96.0.0/12"]
gateway = "10.244.0.1"
adapter = "Ethernet"
local_routed_vip = false
dual_stack = true
outbound_nat = true
default_route = "none"
route_metric = 9000
call_timeout = "3s"
max_concurrent_calls = 2
retry_max = "2s"

[kubernetes]
enabled = true
kubeconfig = "C:\\ProgramData\\nri-hcn-portmap\\kubeconfig"
node_name = "win-node-1"
queue_size = 64
labels_max_age = "2m"

[admin]
listen = "127.0.0.1:9999"
socket = "/run/portmap/admin.sock"
metrics_listen = ":9467"
key_file = "/run/portmap/admin.key"

[log]
level = "debug"
format = "json"
file = "C:\\ProgramData\\nri-hcn-portmap\\log.txt"
max_size_mb = 20
max_files = 2
`)
	cfg, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.ValidateOn(p, nil, "linux"); err != nil { // the simulated backend: Linux semantics
		t.Fatal(err)
	}
	want := Config{
		Plugin: Plugin{Source: "containerd", ResyncInterval: Duration{30 * time.Second}, MappingSources: []string{"annotations", "cri"},
			FailurePolicy: "fail-closed", Deadline: Duration{time.Second}, MaxMappingsPerPod: 16, MaxAnnotationBytes: 4096, ShutdownGrace: Duration{2 * time.Second},
			HyperVRuntimeHandlers: []string{"runhcs-wcow-hypervisor", "wcow-vm"}},
		Admission: Admission{Namespaces: []string{"ingress", "kube-system"}, PodSelector: "hostports=allowed",
			HostPortRanges: []string{"80", "443", "30000-32767"}, HostIPs: []string{"10.0.0.0/24"}, Deny: []string{},
			PodSecurity: "enforce", PodSecurityDefaultLevel: "baseline", PodSecurityExemptNamespaces: []string{"kube-system"},
			NetworkPolicy: "kubernetes-only"},
		NRI:        NRI{Socket: "/run/nri/nri.sock", PluginName: "portmap", PluginIndex: "10", ReconnectMax: Duration{5 * time.Second}},
		Containerd: Containerd{Address: "/run/containerd/containerd.sock", Namespace: "k8s.io"},
		HCN: HCN{Backend: "simulated", SimulatorAddress: "unix:///tmp/sim.sock", Network: "pods", CreateNetwork: true, AllowCNINetwork: true,
			NetworkType: "L2Bridge", Subnet: "10.244.0.0/24", Gateway: "10.244.0.1", ClusterRanges: []string{"10.96.0.0/12"}, Adapter: "Ethernet",
			DualStack: true, OutboundNAT: true, DefaultRoute: "none", RouteMetric: 9000, CallTimeout: Duration{3 * time.Second}, MaxConcurrentCalls: 2, RetryMax: Duration{2 * time.Second}},
		Kubernetes: Kubernetes{Enabled: true, Kubeconfig: `C:\ProgramData\nri-hcn-portmap\kubeconfig`, NodeName: "win-node-1", QueueSize: 64, LabelsMaxAge: Duration{2 * time.Minute}},
		Admin:      Admin{Listen: "127.0.0.1:9999", Socket: "/run/portmap/admin.sock", MetricsListen: ":9467", KeyFile: "/run/portmap/admin.key"},
		Log:        Log{Level: "debug", Format: "json", File: `C:\ProgramData\nri-hcn-portmap\log.txt`, MaxSizeMB: 20, MaxFiles: 2},
	}
	if !reflect.DeepEqual(cfg, want) {
		t.Errorf("Load =\n%+v\nwant\n%+v", cfg, want)
	}
}

func TestLoadKeepsDefaultsForOmittedKeys(t *testing.T) {
	p := write(t, "[hcn]\nnetwork = \"pods\"\n")
	cfg, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	want := Default()
	want.HCN.Network = "pods"
	if !reflect.DeepEqual(cfg, want) {
		t.Errorf("Load = %+v, want defaults but network", cfg)
	}
	if cfg.Plugin.Source != "auto" || cfg.Plugin.ResyncInterval.Duration != time.Minute ||
		!reflect.DeepEqual(cfg.Plugin.MappingSources, []string{"annotations", "cri"}) || !cfg.HCN.CreateNetwork {
		t.Errorf("plugin defaults = %+v, want auto, 1m, annotations and hostPort, create_network", cfg.Plugin)
	}
	if !cfg.HCN.LocalRoutedVIP {
		t.Error("local_routed_vip must default to true")
	}
}

func TestLoadErrors(t *testing.T) {
	tests := []struct {
		name, body string
		is         error
		want       []string
	}{
		{"unknown key", "[hcn]\nnetwork = \"x\"\nnetwrok = \"y\"\n", ErrUnknownKey, []string{":3:", `unknown key "hcn.netwrok"`}},
		{"unknown table", "[metrics]\nlisten = \"x\"\n", ErrUnknownKey, []string{":1:", `unknown key "metrics"`}},
		{"two unknown keys", "[log]\nlevl = \"x\"\n[nri]\nsocet = \"y\"\n", ErrUnknownKey, []string{`"log.levl"`, `"nri.socet"`}},
		{"syntax", "[hcn\nnetwork = 1\n", ErrSyntax, []string{":1:"}},
		{"wrong type", "[hcn]\ncreate_network = \"yes\"\n", ErrSyntax, []string{":2:"}},
		{"bad duration", "[hcn]\ncall_timeout = \"soon\"\n", ErrSyntax, []string{`"soon" is not a duration`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := write(t, tt.body)
			_, err := Load(p)
			if !errors.Is(err, tt.is) {
				t.Fatalf("Load: %v, want %v", err, tt.is)
			}
			if !strings.Contains(err.Error(), p) {
				t.Errorf("error %q does not name the file", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
	if _, err := Load(filepath.Join(testfs.TempDir(t), "missing.toml")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*Config)
		want   string // "" = valid
	}{
		{"defaults", func(*Config) {}, ""},
		{"simulated needs an address", func(c *Config) { c.HCN.Backend = "simulated" }, `hcn.simulator_address = ""`},
		{"unknown backend", func(c *Config) { c.HCN.Backend = "hyperv" }, `hcn.backend = "hyperv": must be windows or simulated`},
		{"bad network type", func(c *Config) { c.HCN.NetworkType = "Overlay" }, `hcn.network_type = "Overlay"`},
		{"bad subnet", func(c *Config) { c.HCN.Subnet = "10.0.0.0/33" }, `hcn.subnet = "10.0.0.0/33"`},
		{"gateway outside subnet", func(c *Config) { c.HCN.Subnet = "10.0.0.0/24"; c.HCN.Gateway = "10.0.1.1" }, `hcn.gateway = "10.0.1.1": is not inside hcn.subnet 10.0.0.0/24`},
		{"bad gateway", func(c *Config) { c.HCN.Gateway = "gw" }, `hcn.gateway = "gw"`},
		{"cluster range not a CIDR", func(c *Config) { c.HCN.ClusterRanges = []string{"10.96.0.0/12", "svc"} }, `hcn.cluster_ranges[1] = "svc": is not a CIDR prefix`},
		{"subnet in a cluster range", func(c *Config) { c.HCN.Subnet, c.HCN.ClusterRanges = "172.20.0.0/20", []string{"172.20.0.0/16"} },
			`hcn.subnet = "172.20.0.0/20": overlaps the cluster's range 172.20.0.0/16`},
		{"subnet clear of the cluster's ranges", func(c *Config) {
			c.HCN.Subnet, c.HCN.ClusterRanges = "172.30.0.0/16", []string{"172.20.0.0/16", "10.96.0.0/12"}
		}, ""},
		{"l2bridge create needs subnet", func(c *Config) {
			c.HCN.CreateNetwork = true
			c.HCN.NetworkType = "L2Bridge"
			c.HCN.AllowCNINetwork = true
		}, `hcn.subnet = ""`},
		{"a network other than NAT needs consent", func(c *Config) { c.HCN.NetworkType = "L2Bridge"; c.HCN.Subnet = "10.1.0.0/24" },
			`hcn.network_type = "L2Bridge": endpoints on a network other than NAT get an address`},
		{"empty network", func(c *Config) { c.HCN.Network = "" }, `hcn.network = ""`},
		{"plugin index", func(c *Config) { c.NRI.PluginIndex = "100" }, `nri.plugin_index = "100"`},
		{"plugin name", func(c *Config) { c.NRI.PluginName = "a b" }, `nri.plugin_name = "a b"`},
		{"log level", func(c *Config) { c.Log.Level = "loud" }, `log.level = "loud"`},
		{"log format", func(c *Config) { c.Log.Format = "xml" }, `log.format = "xml"`},
		{"call timeout", func(c *Config) { c.HCN.CallTimeout.Duration = 0 }, `hcn.call_timeout = "0s"`},
		{"bad source", func(c *Config) { c.Plugin.Source = "cri" }, `plugin.source = "cri": must be one of nri, containerd, auto`},
		{"resync disabled", func(c *Config) { c.Plugin.ResyncInterval.Duration = 0 }, ""},
		{"negative resync", func(c *Config) { c.Plugin.ResyncInterval.Duration = -time.Second }, `plugin.resync_interval = "-1s"`},
		{"no mapping source", func(c *Config) { c.Plugin.MappingSources = nil }, `plugin.mapping_sources = "[]"`},
		{"unknown mapping source", func(c *Config) { c.Plugin.MappingSources = []string{"cri", "labels"} }, `plugin.mapping_sources = "labels": must be annotations or cri`},
		{"mapping source twice", func(c *Config) { c.Plugin.MappingSources = []string{"cri", "cri"} }, `plugin.mapping_sources = "cri": is listed twice`},
		{"Hyper-V handler blank", func(c *Config) { c.Plugin.HyperVRuntimeHandlers = []string{" "} }, `plugin.hyperv_runtime_handlers = " ": must be a runtime handler name`},
		{"Hyper-V handler twice", func(c *Config) { c.Plugin.HyperVRuntimeHandlers = []string{"vm", "vm"} }, `plugin.hyperv_runtime_handlers = "vm": is listed twice`},
		{"no Hyper-V handlers", func(c *Config) { c.Plugin.HyperVRuntimeHandlers = []string{} }, ""},
		{"failure policy", func(c *Config) { c.Plugin.FailurePolicy = "retry" }, `plugin.failure_policy = "retry"`},
		{"deadline at NRI timeout", func(c *Config) { c.Plugin.Deadline.Duration = 2 * time.Second }, `plugin.deadline = "2s": must be positive and below`},
		{"admission range", func(c *Config) { c.Admission.HostPortRanges = []string{"9-1"} }, `admission.host_port_ranges = "9-1"`},
		{"admission deny", func(c *Config) { c.Admission.Deny = []string{"rdp"} }, `admission.deny = "rdp"`},
		{"retry max", func(c *Config) { c.HCN.RetryMax.Duration = 0 }, `hcn.retry_max = "0s"`},
		{"admin listen", func(c *Config) { c.Admin.Listen = "9466" }, `admin.listen = "9466"`},
		{"admin disabled", func(c *Config) { c.Admin.Listen = "" }, ""},
		{"log size", func(c *Config) { c.Log.MaxSizeMB = 0 }, `log.max_size_mb = "0"`},
		{"empty containerd address", func(c *Config) { c.Containerd.Address = "" }, `containerd.address = ""`},
		{"dual stack on NAT", func(c *Config) { c.HCN.DualStack = true }, `hcn.dual_stack = "true": NAT networks do not support IPv6 (hcn.network_type = "NAT")`},
		{"dual stack on L2Bridge", func(c *Config) {
			c.HCN.DualStack, c.HCN.NetworkType, c.HCN.Subnet, c.HCN.AllowCNINetwork = true, "L2Bridge", "10.1.0.0/24", true
		}, ""},
		{"containerd over loopback TCP", func(c *Config) { c.Containerd.Address = "tcp://127.0.0.1:10010" }, ""},
		{"containerd over remote TCP", func(c *Config) { c.Containerd.Address = "tcp://10.0.0.5:10010" }, `containerd.address = "tcp://10.0.0.5:10010": a tcp:// address must be a loopback IP and port`},
		{"containerd TCP without port", func(c *Config) { c.Containerd.Address = "tcp://localhost" }, `containerd.address = "tcp://localhost"`},
		{"default route mode", func(c *Config) { c.HCN.DefaultRoute = "low" }, `hcn.default_route = "low": must be one of low-priority, none, hns`},
		{"kubernetes queue empty", func(c *Config) { c.Kubernetes.QueueSize = 0 }, `kubernetes.queue_size = "0": must be 1 to 65536`},
		{"default route hns", func(c *Config) { c.HCN.DefaultRoute = "hns" }, ""},
		{"route metric zero", func(c *Config) { c.HCN.RouteMetric = 0 }, `hcn.route_metric = "0": must be 1 to 65535`},
		{"route metric over 16 bits", func(c *Config) { c.HCN.RouteMetric = 65536 }, `hcn.route_metric = "65536"`},
		{"route metric at its bound", func(c *Config) { c.HCN.RouteMetric = 65535 }, ""},
		{"no HNS call slots", func(c *Config) { c.HCN.MaxConcurrentCalls = 0 }, `hcn.max_concurrent_calls = "0": must be 1 to 64`},
		{"no mappings allowed", func(c *Config) { c.Plugin.MaxMappingsPerPod = 0 }, `plugin.max_mappings_per_pod = "0": must be 1 to 4096`},
		{"too many mappings allowed", func(c *Config) { c.Plugin.MaxMappingsPerPod = 4097 }, `plugin.max_mappings_per_pod = "4097": must be 1 to 4096`},
		{"mappings cap at its bound", func(c *Config) { c.Plugin.MaxMappingsPerPod = 4096 }, ""},
		{"annotation bytes too small", func(c *Config) { c.Plugin.MaxAnnotationBytes = 63 }, `plugin.max_annotation_bytes = "63": must be 64 to 262144`},
		{"admin on every address", func(c *Config) { c.Admin.Listen = ":9466" }, `admin.listen = ":9466": must be a loopback address`},
		{"admin on every IPv4 address", func(c *Config) { c.Admin.Listen = "0.0.0.0:9466" }, `admin.listen = "0.0.0.0:9466": must be a loopback address`},
		{"admin on every IPv6 address", func(c *Config) { c.Admin.Listen = "[::]:9466" }, `admin.listen = "[::]:9466": must be a loopback address`},
		{"admin on an IPv4-mapped every address", func(c *Config) { c.Admin.Listen = "[::ffff:0.0.0.0]:9466" }, `must be a loopback address`},
		{"admin on the node's address", func(c *Config) { c.Admin.Listen = "10.0.0.4:9466" }, `admin.listen = "10.0.0.4:9466": must be a loopback address`},
		{"admin on IPv6 loopback", func(c *Config) { c.Admin.Listen = "[::1]:9466" }, ""},
		{"admin on localhost (issue 54: it names two addresses)", func(c *Config) { c.Admin.Listen = "localhost:9466" }, `admin.listen = "localhost:9466": must be a loopback IP address, 127.0.0.1:9466 or [::1]:9466`},
		{"admin on [::1]", func(c *Config) { c.Admin.Listen = "[::1]:9466" }, ""},
		{"metrics on a name (issue 54)", func(c *Config) { c.Admin.MetricsListen = "node.example:9467" }, `admin.metrics_listen = "node.example:9467": must be an IP address and port, or :9467`},
		{"metrics on an address", func(c *Config) { c.Admin.MetricsListen = "10.0.0.4:9467" }, ""},
		{"metrics on every address", func(c *Config) { c.Admin.MetricsListen = ":9467" }, ""},
		{"metrics without a port", func(c *Config) { c.Admin.MetricsListen = "0.0.0.0" }, `admin.metrics_listen = "0.0.0.0": must be host:port`},
		{"metrics on the admin address", func(c *Config) { c.Admin.MetricsListen = c.Admin.Listen },
			`admin.metrics_listen = "127.0.0.1:9466": port 9466 is admin.listen's (127.0.0.1:9466): give metrics a port of their own`},
		// issue 48: values no node can use
		{"metrics on the admin port, every address", func(c *Config) { c.Admin.MetricsListen = ":9466" },
			`admin.metrics_listen = ":9466": port 9466 is admin.listen's (127.0.0.1:9466): give metrics a port of their own`},
		{"an admin port past 65535", func(c *Config) { c.Admin.Listen = "127.0.0.1:99999" },
			`admin.listen = "127.0.0.1:99999": port 99999 is no TCP port: it must be 1 to 65535`},
		{"admin port 0", func(c *Config) { c.Admin.Listen = "127.0.0.1:0" }, `admin.listen = "127.0.0.1:0": port 0 is no TCP port`},
		{"an admin port by name", func(c *Config) { c.Admin.Listen = "127.0.0.1:http" }, `admin.listen = "127.0.0.1:http": port http is no TCP port`},
		{"a metrics port past 65535", func(c *Config) { c.Admin.MetricsListen = ":70000" }, `admin.metrics_listen = ":70000": port 70000 is no TCP port`},
		{"metrics on kubelet's port, not on the deny list", func(c *Config) { c.Admin.MetricsListen = ":10250"; c.Admission.Deny = []string{"3389"} },
			`admin.metrics_listen = ":10250": port 10250 is one the node's own services hold (10248-10250, kept whatever admission.deny says): pick another port`},
		{"metrics on kubelet's port", func(c *Config) { c.Admin.MetricsListen = ":10250" },
			`admin.metrics_listen = ":10250": port 10250 is on admission.deny (10248-10250), the ports kept for the node's own services: pick another port`},
		{"admin on RDP's port", func(c *Config) { c.Admin.Listen = "127.0.0.1:3389" }, `admin.listen = "127.0.0.1:3389": port 3389 is on admission.deny (3389)`},
		{"metrics on a port denied for UDP only", func(c *Config) { c.Admin.MetricsListen = ":9467"; c.Admission.Deny = []string{"9467/udp"} }, ""},
		{"metrics on a port denied for TCP", func(c *Config) { c.Admin.MetricsListen = ":9467"; c.Admission.Deny = []string{"9000-9999/tcp"} },
			`admin.metrics_listen = ":9467": port 9467 is on admission.deny (9000-9999/tcp)`},
		{"annotation bytes too large", func(c *Config) { c.Plugin.MaxAnnotationBytes = 262145 }, `plugin.max_annotation_bytes = "262145"`},
		{"hyperv: both on loopback", func(c *Config) { c.HyperV = HyperV{NodeNetworkService: "127.0.0.1:6668", NCProxy: "[::1]:6669"} }, ""},
		{"hyperv: the service on every address", func(c *Config) { c.HyperV = HyperV{NodeNetworkService: ":6668", NCProxy: "127.0.0.1:6669"} },
			`hyperv.node_network_service = ":6668": must be a loopback IP address and port`},
		{"hyperv: the service on the node's address", func(c *Config) { c.HyperV = HyperV{NodeNetworkService: "10.0.0.4:6668", NCProxy: "127.0.0.1:6669"} },
			`hyperv.node_network_service = "10.0.0.4:6668": must be a loopback IP address and port`},
		{"hyperv: ncproxy by name", func(c *Config) { c.HyperV = HyperV{NodeNetworkService: "127.0.0.1:6668", NCProxy: "localhost:6669"} },
			`hyperv.ncproxy = "localhost:6669": must be a loopback IP address and port`},
		{"hyperv: port 0", func(c *Config) { c.HyperV = HyperV{NodeNetworkService: "127.0.0.1:0", NCProxy: "127.0.0.1:6669"} },
			`hyperv.node_network_service = "127.0.0.1:0": must be a loopback IP address and port`},
		{"hyperv: the service without ncproxy", func(c *Config) { c.HyperV.NodeNetworkService = "127.0.0.1:6668" },
			`hyperv.ncproxy = "": must be set with hyperv.node_network_service`},
		{"hyperv: ncproxy without the service", func(c *Config) { c.HyperV.NCProxy = "127.0.0.1:6669" },
			`hyperv.node_network_service = "": must be set with hyperv.ncproxy`},
		{"hyperv: one address for both", func(c *Config) { c.HyperV = HyperV{NodeNetworkService: "127.0.0.1:6668", NCProxy: "127.0.0.1:6668"} },
			`hyperv.ncproxy = "127.0.0.1:6668": is hyperv.node_network_service's address`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Default()
			tt.mutate(&c)
			err := c.ValidateOn("/etc/x.toml", nil, "linux") // rows about the simulated backend are Linux semantics
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "/etc/x.toml") {
				t.Fatalf("Validate: %v, want ErrInvalid naming /etc/x.toml and %q", err, tt.want)
			}
		})
	}
}

func TestFlagsOverrideFileAndNameThemselves(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("Resolve validates for the running OS, and the simulated backend is Linux-only")
	}
	p := write(t, "[hcn]\nbackend = \"simulated\"\nsimulator_address = \"unix:///a\"\n[log]\nlevel = \"debug\"\n")
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	f := RegisterFlags(fs)
	if err := fs.Parse([]string{"--config", p, "--hcn-simulator", "unix:///b", "--plugin-index", "7"}); err != nil {
		t.Fatal(err)
	}
	_, err := f.Resolve()
	if err == nil || !strings.Contains(err.Error(), `flag --plugin-index: nri.plugin_index = "7"`) {
		t.Fatalf("Resolve: %v, want the bad flag named", err)
	}
	fs = flag.NewFlagSet("t", flag.ContinueOnError)
	f = RegisterFlags(fs)
	if err := fs.Parse([]string{"--config", p, "--hcn-simulator", "unix:///b", "--nri-socket", "/tmp/nri.sock"}); err != nil {
		t.Fatal(err)
	}
	cfg, err := f.Resolve()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.HCN.SimulatorAddress != "unix:///b" || cfg.NRI.Socket != "/tmp/nri.sock" || cfg.Log.Level != "debug" || cfg.HCN.Backend != "simulated" {
		t.Errorf("Resolve = %+v", cfg)
	}
}

// A value of the wrong type names the file, the line as written and both
// types in the words of a configuration file, not Go's.
func TestWrongTypeErrors(t *testing.T) {
	tests := []struct{ body, want string }{
		{"[nri]\nplugin_index = 50\n", `config: F:2: nri.plugin_index = 50: a TOML integer where a string (in quotes, e.g. "50") is expected`},
		{"[log]\nmax_files = \"five\"\n", `config: F:2: log.max_files = "five": a TOML string where a whole number is expected`},
		{"[hcn]\ncreate_network = \"yes\"\n", `config: F:2: hcn.create_network = "yes": a TOML string where true or false is expected`},
		{"[plugin]\nmapping_sources = \"cri\"\n", `config: F:2: plugin.mapping_sources = "cri": a TOML string where a list of strings (e.g. ["a", "b"]) is expected`},
	}
	for _, tt := range tests {
		p := write(t, tt.body)
		_, err := Load(p)
		if err == nil || strings.ReplaceAll(err.Error(), p, "F") != tt.want || !errors.Is(err, ErrSyntax) {
			t.Errorf("Load(%q) = %v\nwant %s", tt.body, err, tt.want)
		}
	}
}

// TestResolveData: the configuration NRI hands a launched plugin replaces
// --config, is decoded as strictly (errors name it, the line and the key),
// flags still win, and an empty one falls back to --config.
func TestResolveData(t *testing.T) {
	file := write(t, "[log]\nlevel = \"debug\"\n")
	const name = "NRI configuration of 10-hcn-portmap (10-hcn-portmap.conf)"
	tests := []struct {
		name    string
		data    string
		args    []string
		check   func(Config) bool
		wantErr string
	}{
		{"replaces --config", "[admin]\nlisten = \"127.0.0.1:9999\"\n", []string{"--config", file},
			func(c Config) bool { return c.Admin.Listen == "127.0.0.1:9999" && c.Log.Level == "info" }, ""},
		{"flags win", "[admin]\nlisten = \"127.0.0.1:9999\"\n", []string{"--admin-listen", "127.0.0.1:9998"},
			func(c Config) bool { return c.Admin.Listen == "127.0.0.1:9998" }, ""},
		{"empty falls back to --config", "  \n", []string{"--config", file},
			func(c Config) bool { return c.Log.Level == "debug" }, ""},
		{"unknown key", "[plugin]\nsorce = \"nri\"\n", nil, nil, name + `:2: unknown key "plugin.sorce"`},
		{"bad value", "[plugin]\nfailure_policy = \"sometimes\"\n", nil, nil, name + `:2: plugin.failure_policy = "sometimes"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fs := flag.NewFlagSet("t", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			f := RegisterFlags(fs)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			cfg, err := f.ResolveData(name, []byte(tc.data))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ResolveData: %v, want ~%q", err, tc.wantErr)
				}
				return
			}
			if err != nil || !tc.check(cfg) {
				t.Fatalf("ResolveData = %+v, %v", cfg, err)
			}
		})
	}
}

// containers/nri-plugins' spelling of the NRI flags is accepted too, and an
// error names the flag as written.
func TestNRIFlagAliases(t *testing.T) {
	for _, tt := range []struct {
		args       []string
		name, idx  string
		wantErrSub string
	}{
		{[]string{"--nri-plugin-name", "portmap", "--nri-plugin-index", "42"}, "portmap", "42", ""},
		{[]string{"--plugin-name", "portmap", "--plugin-index", "43"}, "portmap", "43", ""},
		{[]string{"--nri-plugin-index", "7"}, "", "", `flag --nri-plugin-index: nri.plugin_index = "7"`},
	} {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			fs := flag.NewFlagSet("t", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			f := RegisterFlagsFor(fs, "nri.plugin_name", "nri.plugin_index")
			if err := fs.Parse(tt.args); err != nil {
				t.Fatal(err)
			}
			cfg, err := f.Resolve()
			if tt.wantErrSub != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErrSub) {
					t.Fatalf("Resolve: %v, want %q", err, tt.wantErrSub)
				}
				return
			}
			if err != nil || cfg.NRI.PluginName != tt.name || cfg.NRI.PluginIndex != tt.idx {
				t.Fatalf("Resolve = %+v, %v; want name %q index %q", cfg.NRI, err, tt.name, tt.idx)
			}
		})
	}
}
