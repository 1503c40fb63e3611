// Package config holds the plugin's configuration: defaults, strict TOML
// decoding (an unknown key is an error naming file, line and key), command
// line overrides and validation.
package config

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pelletier/go-toml/v2"
)

// Backends of the HCN seam.
const (
	BackendWindows   = "windows"
	BackendSimulated = "simulated"
)

// Event sources.
const (
	SourceNRI        = "nri"
	SourceContainerd = "containerd"
	SourceAuto       = "auto"
)

// Failure policies: what a pod start does when HCN is slower than the
// deadline.
const (
	FailOpen   = "fail-open"
	FailClosed = "fail-closed"
)

// Upper bounds of the per-pod limits an operator may configure.
const (
	MaxMappingsLimit   = 4096
	MaxAnnotationLimit = 256 << 10
)

// Default routes of the plugin's endpoints (hcn.default_route; package hcn
// gives them their meaning, and a test keeps the two lists equal).
const (
	RouteLowPriority = "low-priority"
	RouteNone        = "none"
	RouteHNS         = "hns"
	// DefaultRouteMetric is the low-priority route's metric: well above
	// Windows' default route metric (256, what a route gets when nobody
	// sets one, as CNIs do) plus interface metrics (5 to 75 automatic), so
	// it never wins, with room above it.
	DefaultRouteMetric = 5000
)

// RouteModes lists the default route modes in the order the docs give them.
func RouteModes() []string { return []string{RouteLowPriority, RouteNone, RouteHNS} }

// Sources of port mappings.
const (
	MappingsAnnotations = "annotations"
	MappingsCRI         = "cri"
)

// Config is the whole configuration file.
type Config struct {
	Plugin     Plugin     `toml:"plugin"`
	NRI        NRI        `toml:"nri"`
	Containerd Containerd `toml:"containerd"`
	HCN        HCN        `toml:"hcn"`
	Kubernetes Kubernetes `toml:"kubernetes"`
	Admission  Admission  `toml:"admission"`
	Admin      Admin      `toml:"admin"`
	HyperV     HyperV     `toml:"hyperv"`
	Log        Log        `toml:"log"`
}

// HyperV is how host ports reach Hyper-V isolated pods: through hcsshim's
// ncproxy, which asks the plugin's NodeNetworkService for each such pod's
// network before its utility VM uses it (issue 57).
type HyperV struct {
	// NodeNetworkService is where the plugin serves ncproxy's
	// NodeNetworkService (gRPC): a loopback IP and port, the address
	// ncproxy's node_net_svc_addr names. Empty (the default): not served,
	// and Hyper-V pods are refused host ports.
	NodeNetworkService string `toml:"node_network_service"`
	// NCProxy is ncproxy's gRPC address (its config's "grpc"), where the
	// plugin adds the pod's network adapters (AddNIC): a loopback IP and
	// port; required with node_network_service.
	NCProxy string `toml:"ncproxy"`
}

// Admin is where operators reach /healthz, /metrics and /reload.
type Admin struct {
	// Listen address of the admin endpoints that read (/healthz, /livez,
	// /metrics, /mappings): a loopback address; empty disables them.
	Listen string `toml:"listen"`
	// Socket is where the endpoints that change what the plugin does
	// (POST /reload) are served, to the node's administrators alone: a
	// named pipe on Windows whose DACL admits SYSTEM and Administrators,
	// a unix socket on Linux in a folder only root may enter. Empty
	// disables them.
	Socket string `toml:"socket"`
	// MetricsListen, when set, serves GET /metrics alone on this address,
	// which may be any (e.g. ":9467", for Prometheus to scrape the node).
	MetricsListen string `toml:"metrics_listen"`
	// KeyFile is where the plugin writes, at each start, the key its
	// answers on admin.listen prove themselves with (plugin/admin
	// proof.go), in a folder of the node's administrators alone; the
	// commands that ask the plugin read it there.
	KeyFile string `toml:"key_file"`
}

// absolutePath says whether p is absolute for Windows (C:\..., \\server\...)
// or Linux (/...): the configuration is validated for either.
func absolutePath(p string) bool {
	return strings.HasPrefix(p, "/") || strings.HasPrefix(p, `\\`) ||
		(len(p) > 2 && p[1] == ':' && (p[2] == '\\' || p[2] == '/'))
}

// IsLoopback says whether addr (host:port) can be reached only from the
// node itself: a loopback IP or "localhost". An empty host (":9466")
// means every address, so it is not.
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}

// ipOrEmpty: addr's host is an IP literal, or empty (every address).
func ipOrEmpty(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	_, perr := netip.ParseAddr(host)
	return host == "" || perr == nil
}

// Plugin is what drives the plugin and what it acts on.
type Plugin struct {
	// Source of pod events: nri, containerd or auto.
	Source string `toml:"source"`
	// ResyncInterval between full reconciles of HCN against containerd;
	// 0 disables them.
	ResyncInterval Duration `toml:"resync_interval"`
	// MappingSources: where port mappings come from, "annotations" (the
	// hcn.nri.io/port-mappings annotation) and/or "cri" (Kubernetes hostPort
	// from containerd's CRI sandbox metadata).
	MappingSources []string `toml:"mapping_sources"`
	// FailurePolicy when HCN work does not finish within Deadline:
	// fail-open (the pod proceeds, the endpoint is completed in the
	// background) or fail-closed (the pod fails, nothing is left behind).
	FailurePolicy string `toml:"failure_policy"`
	// Deadline for a pod event's HCN work, safely below NRI's 2 s request
	// timeout.
	Deadline Duration `toml:"deadline"`
	// MaxMappingsPerPod caps one pod's host-port mappings, annotation and
	// Kubernetes hostPort together, a range counting its ports (1024: one
	// RTP block of 1,000 ports fits; issue 56).
	MaxMappingsPerPod int `toml:"max_mappings_per_pod"`
	// MaxAnnotationBytes caps the size of the port-mappings annotation.
	MaxAnnotationBytes int `toml:"max_annotation_bytes"`
	// ShutdownGrace bounds how long a stopping plugin waits for HCN work
	// in flight; the rest is left to the next start's reconcile.
	ShutdownGrace Duration `toml:"shutdown_grace"`
	// HyperVRuntimeHandlers are CRI runtime handlers whose pods are
	// Hyper-V isolated: host ports are refused for them (their utility VM
	// takes the namespace's endpoints only when it starts). The container
	// record's runhcs options are read as well; [] trusts those alone.
	HyperVRuntimeHandlers []string `toml:"hyperv_runtime_handlers"`
}

// NRI is how the plugin registers with the runtime.
type NRI struct {
	Socket      string `toml:"socket"`
	PluginName  string `toml:"plugin_name"`
	PluginIndex string `toml:"plugin_index"`
	// ReconnectMax caps the backoff between reconnection attempts.
	ReconnectMax Duration `toml:"reconnect_max"`
}

// Containerd is where sandboxes are read from.
type Containerd struct {
	Address   string `toml:"address"`
	Namespace string `toml:"namespace"`
}

// Kubernetes is how the plugin tells pod owners what became of their host
// ports: events on the pod and a pod condition, through the API server.
type Kubernetes struct {
	Enabled bool `toml:"enabled"`
	// Kubeconfig: a kubeconfig file (a Windows service); empty: the
	// in-cluster configuration (the HostProcess DaemonSet's service
	// account).
	Kubeconfig string `toml:"kubeconfig"`
	// NodeName: this node (empty: the NODE_NAME environment variable, the
	// downward API); reports go only to pods of this node.
	NodeName string `toml:"node_name"`
	// QueueSize bounds the reports waiting for the API server; when it is
	// full the oldest is dropped.
	QueueSize int `toml:"queue_size"`
	// LabelsMaxAge bounds how long the namespaces' labels read last stay
	// in force while the API server cannot be read (an expired token, an
	// outage): older, they grant nothing new (annotations are held back
	// as unknown; pods already mapped keep their ports).
	LabelsMaxAge Duration `toml:"labels_max_age"`
}

// HCN is how endpoints are built.
type HCN struct {
	Backend          string `toml:"backend"`
	SimulatorAddress string `toml:"simulator_address"`
	Network          string `toml:"network"`
	CreateNetwork    bool   `toml:"create_network"`
	// AllowCNINetwork lets endpoints go on a network other than NAT, whose
	// addresses a CNI's IPAM may hand out (see hcn.ManagerConfig).
	AllowCNINetwork bool   `toml:"allow_cni_network"`
	NetworkType     string `toml:"network_type"`
	Subnet          string `toml:"subnet"`
	Gateway         string `toml:"gateway"`
	// ClusterRanges are the cluster's service and pod ranges (CIDRs) the
	// NAT subnet must stay clear of: each mapped pod's compartment gets an
	// on-link route for it, which shadows an overlapping range there.
	ClusterRanges []string `toml:"cluster_ranges"`
	// AllowSubnetOverlap takes a NAT network whose subnet overlaps another
	// network's, the cluster's ranges or the host's addresses, with a
	// warning; without it the plugin refuses to start on one.
	AllowSubnetOverlap bool   `toml:"allow_subnet_overlap"`
	Adapter            string `toml:"adapter"`
	LocalRoutedVIP     bool   `toml:"local_routed_vip"`
	DualStack          bool   `toml:"dual_stack"`
	OutboundNAT        bool   `toml:"outbound_nat"`
	// DefaultRoute is the default route of the plugin's endpoints:
	// low-priority, none or hns (RouteModes); RouteMetric the
	// metric of the low-priority one.
	DefaultRoute string   `toml:"default_route"`
	RouteMetric  int      `toml:"route_metric"`
	CallTimeout  Duration `toml:"call_timeout"`
	// MaxConcurrentCalls caps the HNS calls in flight.
	MaxConcurrentCalls int `toml:"max_concurrent_calls"`
	// RetryMax caps the backoff between retries of transient HNS failures.
	RetryMax Duration `toml:"retry_max"`
}

// Log is the logging setup.
type Log struct {
	Level  string `toml:"level"`
	Format string `toml:"format"`
	// File, when set, receives the log instead of stderr (a Windows
	// service has no console), rotated at MaxSizeMB keeping MaxFiles old
	// files.
	File      string `toml:"file"`
	MaxSizeMB int    `toml:"max_size_mb"`
	MaxFiles  int    `toml:"max_files"`
}

// Duration is a time.Duration written as a Go duration string ("1m30s").
type Duration struct{ time.Duration }

// UnmarshalText implements encoding.TextUnmarshaler.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return fmt.Errorf("%q is not a duration like \"30s\" or \"1m\"", string(b))
	}
	d.Duration = v
	return nil
}

// MarshalText implements encoding.TextMarshaler.
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.Duration.String()), nil }

// UsesMappings reports whether port mappings are taken from source m.
func (p Plugin) UsesMappings(m string) bool { return slices.Contains(p.MappingSources, m) }

// DefaultContainerdAddress is containerd's default address on this OS.
func DefaultContainerdAddress() string { return defaultContainerdAddress }

// Default returns the configuration used for every key the file omits.
func Default() Config {
	return Config{
		Plugin: Plugin{Source: SourceAuto, ResyncInterval: Duration{time.Minute}, MappingSources: []string{MappingsAnnotations, MappingsCRI},
			FailurePolicy: FailOpen, Deadline: Duration{1500 * time.Millisecond},
			// real pods map a handful of host ports; 64 is generous and keeps
			// one endpoint's policy list small for HNS; 16 KiB holds 64
			// entries in the most verbose form (a YAML list with host IPs,
			// about 120 bytes each). A HostProcess pod gets about 5 s to stop.
			MaxMappingsPerPod: 1024, MaxAnnotationBytes: 16 << 10, ShutdownGrace: Duration{3 * time.Second},
			HyperVRuntimeHandlers: []string{"runhcs-wcow-hypervisor"}},
		Admission: DefaultAdmission(),
		NRI: NRI{Socket: "/var/run/nri/nri.sock", PluginName: "hcn-portmap", PluginIndex: "50",
			ReconnectMax: Duration{30 * time.Second}},
		Containerd: Containerd{Address: DefaultContainerdAddress(), Namespace: "k8s.io"},
		HCN: HCN{Backend: BackendWindows, Network: "nat", CreateNetwork: true, NetworkType: "NAT", LocalRoutedVIP: true, ClusterRanges: []string{},
			DefaultRoute: RouteLowPriority, RouteMetric: DefaultRouteMetric,
			CallTimeout: Duration{10 * time.Second}, RetryMax: Duration{10 * time.Second}, MaxConcurrentCalls: 12},
		Admin:      Admin{Listen: "127.0.0.1:9466", Socket: defaultAdminSocket, KeyFile: defaultAdminKeyFile},
		Kubernetes: Kubernetes{QueueSize: 256, LabelsMaxAge: Duration{5 * time.Minute}},
		Log:        Log{Level: "info", Format: "text", MaxSizeMB: 10, MaxFiles: 5},
	}
}

// Load reads path over the defaults. Unknown keys, wrong types and syntax
// errors are errors naming the file, the line and the key.
func Load(path string) (Config, error) {
	cfg := Default()
	data, err := os.ReadFile(path)
	if err != nil {
		return cfg, fmt.Errorf("config: %w", err)
	}
	if err := Decode(path, data, &cfg); err != nil {
		return cfg, err
	}
	return cfg, nil
}

// Decode strictly decodes TOML data (named path in errors) into cfg.
func Decode(path string, data []byte, cfg *Config) error {
	data, enc := asUTF8(data)
	if err := unmarkedUTF16(path, data, enc); err != nil {
		return err
	}
	if err := durationsWritten(path, data); err != nil {
		return err
	}
	if err := controlsWritten(path, data); err != nil {
		return err
	}
	dec := toml.NewDecoder(bytes.NewReader(data)).DisallowUnknownFields()
	err := dec.Decode(cfg)
	var strict *toml.StrictMissingError
	var derr *toml.DecodeError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &strict):
		msgs := make([]string, 0, len(strict.Errors))
		for i := range strict.Errors {
			e := &strict.Errors[i]
			row, _ := e.Position()
			msg := fmt.Sprintf("%s:%d: unknown key %q", path, row, strings.Join(e.Key(), "."))
			if help := suggest(e.Key()); help != "" {
				msg += ": " + help
			}
			msgs = append(msgs, msg)
		}
		return &Error{Path: path, Msg: strings.Join(msgs, "; "), Err: ErrUnknownKey}
	case errors.As(err, &derr):
		row, _ := derr.Position()
		line := strings.TrimSpace(lineOf(data, row))
		key := cmp.Or(strings.Join(derr.Key(), "."), keyOnLine(data, row))
		if m := typeMismatch.FindStringSubmatch(derr.Error()); m != nil && key != "" {
			// a value of the wrong type: say which, in TOML's words, and
			// show the line as written
			// (its key with its section: the line names it without)
			written := line
			if i := strings.LastIndex(key, "."); i >= 0 {
				written = key[:i+1] + line
			}
			return &Error{Path: path, Msg: fmt.Sprintf("%s:%d: %s: a TOML %s where %s is expected", path, row,
				written, m[1], tomlKind(m[2])), Err: ErrSyntax}
		}
		msg := fmt.Sprintf("%s:%d:", path, row)
		if key != "" {
			msg += " " + key + ":"
		}
		msg += " " + derr.Error()
		if fix := syntaxFix(line, derr.Error()); fix != "" {
			msg += " (the line: " + line + "): " + fix
		}
		return &Error{Path: path, Msg: msg, Err: ErrSyntax}
	}
	return &Error{Path: path, Msg: fmt.Sprintf("%s: %v", path, err), Err: err}
}

// typeMismatch matches go-toml's "cannot decode TOML integer into struct
// field X of type string".
var typeMismatch = regexp.MustCompile(`cannot decode TOML (\w+) into .* of type (\S+)$`)

// tomlKind names a Go field type the way a configuration file writes it.
func tomlKind(goType string) string {
	switch goType {
	case "string":
		return `a string (in quotes, e.g. "50")`
	case "int":
		return "a whole number"
	case "bool":
		return "true or false"
	case "[]string":
		return `a list of strings (e.g. ["a", "b"])`
	case "config.Duration":
		return `a duration string (e.g. "30s")`
	}
	return "a " + goType
}

func lineOf(data []byte, n int) string {
	lines := strings.Split(string(data), "\n")
	if n < 1 || n > len(lines) {
		return ""
	}
	return lines[n-1]
}

// Errors of this package, for errors.Is.
var (
	ErrUnknownKey = errors.New("unknown configuration key")
	ErrSyntax     = errors.New("configuration syntax error")
	ErrInvalid    = errors.New("invalid configuration value")
)

// Error is a configuration error; Msg names the file (or flag), the field
// and the bad value.
type Error struct {
	Path string
	Msg  string
	Err  error
}

func (e *Error) Error() string { return "config: " + e.Msg }
func (e *Error) Unwrap() error { return e.Err }

// Validate checks every field. origin names where each value came from
// (key -> "flag --x"), falling back to source (the file path, or "defaults").
func (c *Config) Validate(source string, origin map[string]string) error {
	return c.ValidateOn(source, origin, thisOS)
}

// ValidateOn checks the configuration for a plugin running on goos: what
// a Windows node's plugin refuses, read on Linux (the chart's ConfigMap is
// for Windows nodes; test/deploy holds helm to it).
func (c *Config) ValidateOn(source string, origin map[string]string, goos string) error {
	var errs []string
	bad := func(key string, value any, why string) {
		from := source
		if o, ok := origin[key]; ok {
			from = o
		}
		errs = append(errs, fmt.Sprintf("%s: %s = %q: %s", from, key, fmt.Sprint(value), why))
	}
	// the rules a JSON schema can say too (the chart's), then the others
	c.checkLimits(goos, bad)
	if len(c.Plugin.MappingSources) == 0 {
		bad("plugin.mapping_sources", c.Plugin.MappingSources, "must name at least one of annotations, cri")
	}
	for i, m := range c.Plugin.MappingSources {
		if slices.Contains(c.Plugin.MappingSources[:i], m) {
			bad("plugin.mapping_sources", m, "is listed twice")
		}
	}
	for i, h := range c.Plugin.HyperVRuntimeHandlers {
		if strings.TrimSpace(h) != h || h == "" {
			bad("plugin.hyperv_runtime_handlers", h, "must be a runtime handler name without spaces around it")
		} else if slices.Contains(c.Plugin.HyperVRuntimeHandlers[:i], h) {
			bad("plugin.hyperv_runtime_handlers", h, "is listed twice")
		}
	}
	rules, err := c.Admission.Parse()
	if err != nil {
		for _, e := range unjoin(err) {
			from := source
			if key, _, ok := strings.Cut(e.Error(), " = "); ok && origin[key] != "" {
				from = origin[key]
			}
			errs = append(errs, fmt.Sprintf("%s: %s", from, e))
		}
	}
	if c.NRI.Socket == "" {
		bad("nri.socket", c.NRI.Socket, "must not be empty")
	}
	if c.NRI.PluginName == "" || strings.ContainsAny(c.NRI.PluginName, " /\\") {
		bad("nri.plugin_name", c.NRI.PluginName, "must be a non-empty name without spaces or slashes")
	}
	if n, err := strconv.Atoi(c.NRI.PluginIndex); err != nil || len(c.NRI.PluginIndex) != 2 || n < 0 {
		bad("nri.plugin_index", c.NRI.PluginIndex, "must be two digits, 00 to 99")
	}
	if c.Containerd.Address == "" {
		bad("containerd.address", c.Containerd.Address, "must not be empty")
	} else if hostport, ok := strings.CutPrefix(c.Containerd.Address, "tcp://"); ok {
		// a relay to containerd's socket: no authentication
		if ap, err := netip.ParseAddrPort(hostport); err != nil || !ap.Addr().IsLoopback() {
			bad("containerd.address", c.Containerd.Address, "a tcp:// address must be a loopback IP and port, like tcp://127.0.0.1:10010 (a relay to containerd's socket has no authentication)")
		}
	}
	if c.Containerd.Namespace == "" {
		bad("containerd.namespace", c.Containerd.Namespace, "must not be empty")
	}
	switch c.HCN.Backend {
	case BackendWindows:
	case BackendSimulated:
		if goos == "windows" {
			bad("hcn.backend", c.HCN.Backend, "the HNS simulator is a test double for Linux tests and demos and is not part of the Windows build; use windows")
		} else if c.HCN.SimulatorAddress == "" {
			bad("hcn.simulator_address", c.HCN.SimulatorAddress, "must be set for the simulated backend (unix:///path or tcp://127.0.0.1:port)")
		}
	}
	if c.HCN.Network == "" {
		bad("hcn.network", c.HCN.Network, "must name the HNS network endpoints are created on")
	}
	var subnet netip.Prefix
	if c.HCN.Subnet != "" {
		p, err := netip.ParsePrefix(c.HCN.Subnet)
		if err != nil {
			bad("hcn.subnet", c.HCN.Subnet, "is not a CIDR prefix like 172.30.0.0/16")
		}
		subnet = p.Masked()
	}
	for i, r := range c.HCN.ClusterRanges {
		p, err := netip.ParsePrefix(r)
		switch {
		case err != nil:
			bad(fmt.Sprintf("hcn.cluster_ranges[%d]", i), r, "is not a CIDR prefix like 10.96.0.0/12")
		case subnet.IsValid() && p.Overlaps(subnet):
			bad("hcn.subnet", c.HCN.Subnet, "overlaps the cluster's range "+p.Masked().String()+" (hcn.cluster_ranges): mapped pods could not reach it; pick a subnet clear of it")
		}
	}
	if c.HCN.Gateway != "" {
		gw, err := netip.ParseAddr(c.HCN.Gateway)
		switch {
		case err != nil:
			bad("hcn.gateway", c.HCN.Gateway, "is not an IP address")
		case subnet.IsValid() && !subnet.Contains(gw):
			bad("hcn.gateway", c.HCN.Gateway, "is not inside hcn.subnet "+subnet.String())
		}
	}
	if c.HCN.DualStack && c.HCN.NetworkType == "NAT" {
		bad("hcn.dual_stack", c.HCN.DualStack, `NAT networks do not support IPv6 (hcn.network_type = "NAT"); use an L2Bridge network, or turn dual_stack off`)
	}
	if c.HCN.CreateNetwork && c.HCN.NetworkType == "L2Bridge" && c.HCN.Subnet == "" {
		bad("hcn.subnet", c.HCN.Subnet, "must be set to create an L2Bridge network")
	}
	if c.HCN.CreateNetwork && c.HCN.NetworkType != "NAT" && !c.HCN.AllowCNINetwork {
		bad("hcn.network_type", c.HCN.NetworkType, "endpoints on a network other than NAT get an address HNS picks from its subnet, "+
			"which a CNI's IPAM on that network does not know (kubernetes 74766); keep NAT, or set hcn.allow_cni_network = true "+
			"if only HNS hands out this network's addresses")
	}
	// the plugin's own TCP ports: each a port (templates/_validate.tpl
	// refuses the chart's values with the same sentences), neither the
	// other's, neither one kept for the node's services
	var own []OwnPort
	for _, l := range []struct{ key, addr, form string }{
		{"admin.listen", c.Admin.Listen, "must be host:port, e.g. 127.0.0.1:9466 (empty disables)"},
		{"admin.metrics_listen", c.Admin.MetricsListen, "must be host:port, e.g. :9467 (empty: metrics only on admin.listen)"},
	} {
		if l.addr == "" {
			continue
		}
		_, port, err := net.SplitHostPort(l.addr)
		n, perr := strconv.ParseUint(port, 10, 16)
		switch {
		case err != nil || port == "":
			bad(l.key, l.addr, l.form)
		case perr != nil || n == 0:
			bad(l.key, l.addr, PortWhy(port))
		case l.key == "admin.listen" && !IsLoopback(l.addr):
			bad(l.key, l.addr, "must be a loopback address (127.0.0.1, ::1): it says what the plugin holds; "+
				"serve metrics beyond the node with admin.metrics_listen")
		case l.key == "admin.listen" && strings.EqualFold(strings.TrimSuffix(l.addr, ":"+port), "localhost"):
			bad(l.key, l.addr, "must be a loopback IP address, 127.0.0.1:"+port+" or [::1]:"+port+", not localhost: it names both, "+
				"the plugin binds one, and another program may bind the other, which a client may try first (Windows lists ::1 first)")
		case l.key == "admin.metrics_listen" && !ipOrEmpty(l.addr):
			bad(l.key, l.addr, "must be an IP address and port, or :"+port+" for every address, not a name: a name may stand for several "+
				"addresses, of which the plugin would bind one and another program could bind the others")
		case l.key == "admin.metrics_listen" && len(own) > 0 && own[0].Port == uint16(n):
			bad(l.key, l.addr, AdminPortWhy(uint16(n), own[0].Addr))
		default:
			own = append(own, OwnPort{Key: l.key, Addr: l.addr, Port: uint16(n)})
		}
	}
	for _, o := range own {
		if d, ok := holding(rules.Deny, o.Port); ok {
			bad(o.Key, o.Addr, DeniedWhy(o.Port, d))
		} else if d, ok := holding(nodePorts(), o.Port); ok { // whatever admission.deny says
			bad(o.Key, o.Addr, NodePortWhy(o.Port, d))
		}
	}
	c.HyperV.validate(bad)
	if sock := c.Admin.Socket; sock != "" && !strings.HasPrefix(strings.ToLower(sock), `\\.\pipe\`) && !strings.HasPrefix(sock, "/") {
		bad("admin.socket", sock, `must be a named pipe (\\.\pipe\NAME, Windows) or an absolute path (a unix socket, Linux); empty disables reload`)
	}
	if c.Admin.Listen != "" && !absolutePath(c.Admin.KeyFile) {
		bad("admin.key_file", c.Admin.KeyFile, "must be an absolute path: the key that proves the plugin answers at admin.listen")
	}
	if len(errs) > 0 {
		return &Error{Path: source, Msg: strings.Join(errs, "; "), Err: ErrInvalid}
	}
	return nil
}

// PortWhy is why port is no TCP port the plugin can listen on.
func PortWhy(port string) string { return "port " + port + " is no TCP port: it must be 1 to 65535" }

// AdminPortWhy is why metrics are not served on port, admin.listen's
// (at addr).
func AdminPortWhy(port uint16, addr string) string {
	return fmt.Sprintf("port %d is admin.listen's (%s): give metrics a port of their own", port, addr)
}

// DeniedWhy is why the plugin does not listen on port, which the
// admission.deny entry deny holds.
func DeniedWhy(port uint16, deny string) string {
	return fmt.Sprintf("port %d is on admission.deny (%s), the ports kept for the node's own services: pick another port", port, deny)
}

// NodePortWhy is why the plugin does not listen on port, which the node's
// own services hold (DefaultDeny's entry deny), whatever admission.deny
// says.
func NodePortWhy(port uint16, deny string) string {
	return fmt.Sprintf("port %d is one the node's own services hold (%s, kept whatever admission.deny says): pick another port", port, deny)
}

// nodePorts are DefaultDeny's ranges: the ports of the node's own services.
func nodePorts() []PortRange {
	var out []PortRange
	for _, d := range DefaultDeny() {
		if r, err := parseRange(d); err == nil {
			out = append(out, r)
		}
	}
	return out
}

// holding is the entry of ranges that holds TCP port, as written.
func holding(ranges []PortRange, port uint16) (string, bool) {
	for _, d := range ranges {
		if d.Proto != "udp" && d.Lo <= port && port <= d.Hi {
			return d.Text, true
		}
	}
	return "", false
}

// OwnPort is a TCP port the plugin itself listens on.
type OwnPort struct {
	Key, Addr string // the configuration key and its value: admin.listen = 127.0.0.1:9466
	Port      uint16
}

// OwnPorts are the TCP ports the plugin listens on (admin.listen,
// admin.metrics_listen), whatever they are set to: no pod may map one
// (a mapping there shadows the plugin's probes or metrics on the node's
// addresses).
func (a Admin) OwnPorts() []OwnPort {
	var out []OwnPort
	for _, l := range []struct{ key, addr string }{{"admin.listen", a.Listen}, {"admin.metrics_listen", a.MetricsListen}} {
		if l.addr == "" {
			continue
		}
		_, port, err := net.SplitHostPort(l.addr)
		n, perr := strconv.ParseUint(port, 10, 16)
		if err == nil && perr == nil && n > 0 {
			out = append(out, OwnPort{Key: l.key, Addr: l.addr, Port: uint16(n)})
		}
	}
	return out
}

func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// validate: both addresses loopback IPs and ports, both or neither.
func (h HyperV) validate(bad func(key string, v any, why string)) {
	for _, l := range []struct{ key, addr string }{{"hyperv.node_network_service", h.NodeNetworkService}, {"hyperv.ncproxy", h.NCProxy}} {
		if ap, err := netip.ParseAddrPort(l.addr); l.addr != "" && (err != nil || !ap.Addr().Unmap().IsLoopback() || ap.Port() == 0) {
			bad(l.key, l.addr, "must be a loopback IP address and port, like 127.0.0.1:6668: ncproxy speaks gRPC without "+
				"authentication, so only the node may reach it")
		}
	}
	switch {
	case h.NodeNetworkService != "" && h.NCProxy == "":
		bad("hyperv.ncproxy", h.NCProxy, "must be set with hyperv.node_network_service: ncproxy's gRPC address (its config's grpc, 127.0.0.1:6669 by default), where the pod's adapters are added")
	case h.NodeNetworkService == "" && h.NCProxy != "":
		bad("hyperv.node_network_service", h.NodeNetworkService, "must be set with hyperv.ncproxy: the address ncproxy's node_net_svc_addr names (127.0.0.1:6668 by default)")
	case h.NodeNetworkService != "" && h.NodeNetworkService == h.NCProxy:
		bad("hyperv.ncproxy", h.NCProxy, "is hyperv.node_network_service's address: ncproxy listens on its own (its config's grpc)")
	}
}
