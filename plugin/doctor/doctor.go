// Package doctor checks whether a node is fit for the plugin: a table of
// checks, each pass, warn or fail with a one-line fix, and a self-test that
// builds a throwaway namespace and endpoint the way the plugin does, reads
// everything back from HNS and compares it field by field with what was
// sent, then removes all of it.
package doctor

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/config"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/admin"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/containerd"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/hostsockets"
)

// Status of one check.
type Status string

// Check outcomes; any Fail makes the node unfit.
const (
	Pass Status = "pass"
	Warn Status = "warn"
	Fail Status = "fail"
)

// Result is one row of the report.
type Result struct {
	Check  string `json:"check"`
	Status Status `json:"status"`
	Detail string `json:"detail"`
	Fix    string `json:"fix,omitempty"`
}

// Report is every check's result, in order.
type Report struct {
	Results []Result `json:"results"`
}

// Fit reports whether no check failed.
func (r Report) Fit() bool {
	return !slices.ContainsFunc(r.Results, func(x Result) bool { return x.Status == Fail })
}

// Containerd is what the checks read from containerd.
type Containerd interface {
	Version(ctx context.Context) (string, error)
	ListSandboxes(ctx context.Context) ([]string, error)
	Sandbox(ctx context.Context, id string) (*plugin.SandboxInfo, error)
}

// ErrNotRunning: no plugin answers at the admin address.
var ErrNotRunning = errors.New("no plugin answers")

// Doctor runs the checks of one node against its configuration. Every
// field but Config and HNS may be nil: its checks then say what they could
// not look at.
type Doctor struct {
	Config config.Config
	// HNS, or HNSErr when it could not be reached at all.
	HNS    hcn.Node
	HNSErr error
	// Containerd, as configured.
	Containerd Containerd
	// Health asks the running plugin's /healthz; ErrNotRunning when none
	// answers.
	Health func(ctx context.Context) (admin.HealthReport, error)
	// Stat says whether a path exists (the NRI socket).
	Stat func(path string) error
	// Listen tries to bind an address and lets it go again.
	Listen func(addr string) error
	// Windows: the node is Windows (containerd there opens no NRI socket).
	Windows bool
	// NodeRestriction asks whether the API server's node-restriction
	// policy holds the plugin's token to its node (nil: no API server is
	// configured).
	NodeRestriction func(ctx context.Context) (bool, error)
	// PolicyKinds asks the API server which policy kinds it serves that
	// the plugin does not evaluate (nil: not asked)
	PolicyKinds func(ctx context.Context) ([]string, error)
	// HostPrefixes are the host's address prefixes (nil: its interfaces',
	// hcn.InterfacePrefixes).
	HostPrefixes func() ([]netip.Prefix, error)
	// OSBuild is the Windows build number of the node (nil: not asked, as
	// on Linux).
	OSBuild func() (uint32, error)
	// Sockets reads the node's own sockets (nil: not read): a program
	// listening on a host port one of the plugin's endpoints maps is
	// shadowed by the mapping.
	Sockets hostsockets.Reader
	// RuntimeHandlers reads containerd's CRI runtime handlers from its
	// configuration (nil: not read).
	RuntimeHandlers func() ([]containerd.RuntimeHandler, error)
	// Timeout bounds each check (hcn.call_timeout when zero).
	Timeout time.Duration

	seen *seen // what one Run has asked already
}

// seen keeps the answers several checks of one Run need: HNS is asked for
// the network once, the plugin for its health once.
type seen struct {
	netAsked, healthAsked bool
	net                   *hcn.Network
	netErr                error
	health                admin.HealthReport
	healthErr             error
}

// SelfTestPrefix names the self-test's endpoints; it is not the plugin's
// prefix, so a running plugin never takes them for its own orphans.
const SelfTestPrefix = "hcn-portmap-selftest-"

func (d *Doctor) timeout() time.Duration {
	return cmp.Or(d.Timeout, d.Config.HCN.CallTimeout.Duration)
}

// Run runs every node check.
func (d *Doctor) Run(ctx context.Context) Report {
	var r Report
	d.seen = &seen{}
	defer func() { d.seen = nil }()
	checks := []func(context.Context) Result{d.checkHNS, d.checkNetwork, d.checkIPv6, d.checkContainerd,
		d.checkEvents, d.checkNRISocket, d.checkAdmin, d.checkHyperV, d.checkPodSecurity, d.checkNetworkPolicy, d.checkNodeRestriction, d.checkShadowed, d.checkNodeLocal}
	for _, c := range checks {
		cctx, cancel := context.WithTimeout(ctx, d.timeout())
		r.Results = append(r.Results, c(cctx))
		cancel()
	}
	return r
}

func (d *Doctor) checkHNS(ctx context.Context) Result {
	const name = "HNS"
	if d.HNSErr != nil {
		return Result{name, Fail, d.HNSErr.Error(), "HNS v2 (Windows Server 2019 or later) must run: Start-Service hns"}
	}
	v, err := d.HNS.Version(ctx)
	if err != nil {
		return Result{name, Fail, "version: " + err.Error(), "check the hns service: Get-Service hns; Restart-Service hns"}
	}
	return Result{name, Pass, "v2 API, version " + v, ""}
}

// network looks the configured network up, once per Run.
func (d *Doctor) network(ctx context.Context) (*hcn.Network, error) {
	if d.HNSErr != nil {
		return nil, d.HNSErr
	}
	if d.seen == nil {
		return d.HNS.GetNetworkByName(ctx, d.Config.HCN.Network)
	}
	if !d.seen.netAsked {
		d.seen.netAsked = true
		d.seen.net, d.seen.netErr = d.HNS.GetNetworkByName(ctx, d.Config.HCN.Network)
	}
	return d.seen.net, d.seen.netErr
}

// health asks the running plugin's /healthz, once per Run.
func (d *Doctor) health(ctx context.Context) (admin.HealthReport, error) {
	if d.seen == nil {
		return d.Health(ctx)
	}
	if !d.seen.healthAsked {
		d.seen.healthAsked = true
		d.seen.health, d.seen.healthErr = d.Health(ctx)
	}
	return d.seen.health, d.seen.healthErr
}

func (d *Doctor) checkNetwork(ctx context.Context) Result {
	c := d.Config.HCN
	name := "network " + c.Network
	n, err := d.network(ctx)
	switch {
	case errors.Is(err, hcn.ErrNotFound) && c.CreateNetwork:
		return Result{name, Warn, "does not exist; the plugin creates it when it starts (hcn.create_network), with hcn.subnet or a subnet it picks clear of the host's addresses, the HNS networks and hcn.cluster_ranges", ""}
	case errors.Is(err, hcn.ErrNotFound):
		return Result{name, Fail, "does not exist", "create it (e.g. a NAT network), or set hcn.network to an existing one, or hcn.create_network = true"}
	case err != nil:
		return Result{name, Fail, err.Error(), "HNS must answer: see the HNS check"}
	}
	detail := fmt.Sprintf("type %s, subnets %s, gateway %s", n.Type, strings.Join(n.Subnets, " "), cmp.Or(n.Gateway, "(none)"))
	if !n.Type.Is(hcn.NetworkNAT) && !c.AllowCNINetwork {
		return Result{name, Fail, detail + "; not NAT: a CNI's IPAM may hand out its addresses, and would not know the one HNS gives the plugin's endpoint",
			`use a NAT network (the default: hcn.network = "nat", created when missing), or set hcn.allow_cni_network = true if only HNS hands out this network's addresses`}
	}
	if _, err := hcn.RouteMode(c.DefaultRoute).Routes(cmp.Or(n.Gateway, c.Gateway), uint16(c.RouteMetric)); err != nil {
		return Result{name, Fail, detail + "; " + err.Error(), `set hcn.gateway to the network's gateway, or hcn.default_route = "none"`}
	}
	if n.Type.Is(hcn.NetworkNAT) {
		all, err := d.HNS.ListNetworks(ctx)
		if err != nil {
			return Result{name, Warn, detail + "; the other networks' subnets not checked: " + err.Error(), ""}
		}
		hostPrefixes := d.HostPrefixes
		if hostPrefixes == nil {
			hostPrefixes = hcn.InterfacePrefixes
		}
		hosts, err := hostPrefixes()
		if err != nil {
			return Result{name, Warn, detail + "; the host's addresses not checked: " + err.Error(), ""}
		}
		if over := hcn.Overlaps(*n, all, hcn.Prefixes(c.ClusterRanges), hosts); len(over) > 0 {
			status, fix := Fail, "set hcn.subnet (and hcn.gateway) to a range clear of them, with hcn.cluster_ranges naming the cluster's service and pod ranges, "+
				"and recreate the network (nri-hcn-portmap cleanup, then Remove-HnsNetwork and a restart); the plugin refuses to start on it unless hcn.allow_subnet_overlap = true"
			if c.AllowSubnetOverlap {
				status, fix = Warn, "hcn.allow_subnet_overlap = true takes it as it is; "+fix[:strings.Index(fix, ";")]
			}
			return Result{name, status, detail + "; " + strings.Join(over, "; ") + ": pods with mapped host ports get an on-link route for the subnet and cannot reach what it overlaps", fix}
		}
	}
	return Result{name, Pass, detail, ""}
}

func (d *Doctor) checkIPv6(ctx context.Context) Result {
	const name = "IPv6"
	if !d.Config.HCN.DualStack {
		return Result{name, Pass, "IPv4 policies only (hcn.dual_stack off)", ""}
	}
	n, err := d.network(ctx)
	if err != nil {
		return Result{name, Warn, "not checked: " + err.Error(), ""}
	}
	if n.Type.Is(hcn.NetworkNAT) {
		return Result{name, Fail, fmt.Sprintf("hcn.dual_stack is on but network %s is NAT, which does not support IPv6", n.Name),
			"use an L2Bridge network, or turn hcn.dual_stack off"}
	}
	return Result{name, Pass, fmt.Sprintf("dual stack on %s network %s", n.Type, n.Name), ""}
}

func (d *Doctor) checkContainerd(ctx context.Context) Result {
	name := "containerd"
	if d.Containerd == nil {
		return Result{name, Warn, "not checked", ""}
	}
	v, err := d.Containerd.Version(ctx)
	if err != nil {
		return Result{name, Fail, fmt.Sprintf("%s: %v", d.Config.Containerd.Address, err),
			"start containerd, or set containerd.address to where it listens"}
	}
	return Result{name, Pass, fmt.Sprintf("%s at %s", v, d.Config.Containerd.Address), ""}
}

func (d *Doctor) checkEvents(ctx context.Context) Result {
	const name = "event subscription"
	if d.Health == nil {
		return Result{name, Warn, "not checked", ""}
	}
	rep, err := d.health(ctx)
	switch {
	case errors.Is(err, ErrNotRunning):
		return Result{name, Warn, "the plugin is not running (nothing answers at admin.listen " + d.Config.Admin.Listen + ")",
			"start it: Start-Service nri-hcn-portmap, or its DaemonSet"}
	case err != nil:
		return Result{name, Fail, err.Error(), "see the plugin's log"}
	}
	if state, ok := rep.Checks["event source"]; ok && state != "ok" {
		return Result{name, Fail, state, "see the plugin's log; is containerd running?"}
	}
	return Result{name, Pass, "the running plugin's event source is live", ""}
}

func (d *Doctor) checkNRISocket(context.Context) Result {
	const name = "NRI socket"
	src := d.Config.Plugin.Source
	if d.Windows {
		if src == config.SourceNRI {
			return Result{name, Fail, "plugin.source = nri, but containerd on Windows opens no NRI socket", `set plugin.source = "auto" or "containerd"`}
		}
		return Result{name, Pass, "none on Windows: the plugin follows containerd's events", ""}
	}
	if d.Stat == nil {
		return Result{name, Warn, "not checked", ""}
	}
	if err := d.Stat(d.Config.NRI.Socket); err != nil {
		if src == config.SourceNRI {
			return Result{name, Fail, d.Config.NRI.Socket + ": " + err.Error(), "enable NRI in containerd's config ([plugins.\"io.containerd.nri.v1.nri\"] disable = false)"}
		}
		return Result{name, Warn, d.Config.NRI.Socket + " absent: the plugin will follow containerd's events", ""}
	}
	return Result{name, Pass, d.Config.NRI.Socket + " present", ""}
}

func (d *Doctor) checkAdmin(ctx context.Context) Result {
	const name = "admin address"
	addr := d.Config.Admin.Listen
	if addr == "" {
		return Result{name, Pass, "disabled (admin.listen is empty)", ""}
	}
	if d.Health != nil {
		_, err := d.health(ctx)
		switch {
		case err == nil:
			return Result{name, Pass, addr + " served by the running plugin (its answer proved with the admin key)", ""}
		case errors.Is(err, admin.ErrNotThePlugin):
			return Result{name, Fail, addr + " is answered by another program: " + err.Error(),
				"stop the program that holds it (the plugin does not run while it does), or set admin.listen to a free address"}
		case errors.Is(err, admin.ErrCannotTell):
			return Result{name, Warn, err.Error(), "run doctor as an administrator"}
		}
	}
	if d.Listen == nil {
		return Result{name, Warn, "not checked", ""}
	}
	if err := d.Listen(addr); err != nil {
		if errors.Is(err, admin.ErrPortForbidden) {
			return Result{name, Fail, addr + " cannot be bound: " + err.Error(), "set admin.listen to a port outside the node's excluded ranges"}
		}
		return Result{name, Fail, addr + " is taken by another program: " + err.Error(), "set admin.listen to a free address"}
	}
	return Result{name, Pass, addr + " free", ""}
}

func (d *Doctor) checkHyperV(ctx context.Context) Result {
	const name = "Hyper-V pods"
	served := d.Config.HyperV.NodeNetworkService != ""
	fix := "map host ports of Hyper-V pods with the CNI's portMappings, or serve ncproxy's NodeNetworkService (hyperv.node_network_service; docs/real-node.md)"
	if served {
		fix = "set NCProxyAddr in the runtime handler's options (containerd's config) and run hcsshim's ncproxy with node_net_svc_addr = " +
			d.Config.HyperV.NodeNetworkService + " (docs/real-node.md)"
	}
	res := Result{Check: name, Status: Pass}
	var says []string
	warn := func(s string) { res.Status, says = Warn, append(says, s) }
	if d.RuntimeHandlers != nil {
		hs, err := d.RuntimeHandlers()
		if err != nil {
			warn("containerd's runtime handlers not read: " + err.Error())
		}
		for _, h := range hs {
			switch {
			case !h.HyperV && !slices.Contains(d.Config.Plugin.HyperVRuntimeHandlers, h.Name):
			case h.NCProxy != "" && served:
				says = append(says, "handler "+h.Name+": Hyper-V, its network set up through ncproxy ("+h.NCProxy+"): host ports mapped")
			case h.NCProxy != "":
				warn("handler " + h.Name + ": Hyper-V, through ncproxy (" + h.NCProxy + "), but this plugin does not serve its NodeNetworkService: host ports refused")
			default:
				warn("handler " + h.Name + ": Hyper-V, no NCProxyAddr in its options: host ports refused")
			}
		}
	}
	if d.Containerd == nil {
		warn("sandboxes not checked")
		return res.saying(says, fix)
	}
	ids, err := d.Containerd.ListSandboxes(ctx)
	if err != nil {
		warn("sandboxes not checked: " + err.Error())
		return res.saying(says, fix)
	}
	var hyperV []string
	for _, id := range ids {
		sb, err := d.Containerd.Sandbox(ctx, id)
		if err == nil && sb.HyperV != "" {
			hyperV = append(hyperV, id)
		}
	}
	switch {
	case len(hyperV) > 0 && served:
		says = append(says, fmt.Sprintf("%d of %d sandboxes are Hyper-V isolated (%s): mapped where ncproxy set their network up", len(hyperV), len(ids), strings.Join(hyperV, ", ")))
	case len(hyperV) > 0:
		warn(fmt.Sprintf("%d of %d sandboxes are Hyper-V isolated (%s): their host ports are refused", len(hyperV), len(ids), strings.Join(hyperV, ", ")))
	default:
		says = append(says, fmt.Sprintf("none among %d sandboxes (handlers treated as Hyper-V: %s)", len(ids), cmp.Or(strings.Join(d.Config.Plugin.HyperVRuntimeHandlers, ", "), "none")))
	}
	return res.saying(says, fix)
}

// saying is r with its detail, and the fix when it warns.
func (r Result) saying(says []string, fix string) Result {
	r.Detail = strings.Join(says, "; ")
	if r.Status != Pass {
		r.Fix = fix
	}
	return r
}

// checkShadowed says whether a program of the node holds a host port one
// of the plugin's endpoints maps (issue 56): one that bound it after the
// pod was mapped (the plugin refuses a port a program holds before); the
// mapping takes the traffic meant for that program.
func (d *Doctor) checkShadowed(ctx context.Context) Result {
	const name = "host ports shadowed"
	if d.Sockets == nil {
		return Result{name, Warn, "not checked: the node's sockets are not read", ""}
	}
	if d.HNSErr != nil || d.HNS == nil {
		return Result{name, Warn, "not checked: HNS does not answer", ""}
	}
	eps, err := d.HNS.ListEndpoints(ctx)
	if err != nil {
		return Result{name, Warn, "not checked: " + err.Error(), ""}
	}
	var mapped []hcn.PortMappingPolicy
	of := map[hcn.PortMappingPolicy]string{}
	for _, ep := range eps {
		if !strings.HasPrefix(ep.Name, config.EndpointPrefix) {
			continue
		}
		for _, p := range ep.PortMappings {
			mapped, of[p] = append(mapped, p), ep.Name
		}
	}
	if len(mapped) == 0 {
		return Result{name, Pass, "the plugin's endpoints map no host port", ""}
	}
	socks, err := d.Sockets.On(ctx, hostsockets.PortsOf(mapped))
	if err != nil {
		return Result{name, Warn, "not checked: " + err.Error(), ""}
	}
	var shadowed []string
	for _, p := range mapped {
		if s, held := hostsockets.Holding(socks, p); held {
			shadowed = append(shadowed, fmt.Sprintf("%s of %s shadows %s", p, of[p], s))
		}
	}
	if len(shadowed) > 0 {
		return Result{name, Warn, strings.Join(shadowed, "; ") + ": the mapping takes the traffic sent to that program",
			"move the program to another port, or the pod (its mapping goes with its sandbox); status shows the same"}
	}
	return Result{name, Pass, fmt.Sprintf("none of the %d host ports the plugin's endpoints map is held by a program of the node", len(mapped)), ""}
}

// Windows Server builds the node-local paths depend on.
const (
	buildServer2019 = 17763
	buildServer2022 = 20348
)

// checkNodeLocal says what the node's Windows build means for a pod
// reaching a host port on its own node (status.hostIP:hostPort, the
// node-local agent pattern; issue 56): the OS half of that path shipped
// with Windows Server 2022 (AKS 3620; Azure CNI's half is LocalRoutedVip,
// azure-container-networking 1863 and PR 1922); win-bridge needs 1903 or
// later (containernetworking/plugins PR 475). 127.0.0.1:hostPort is no
// path to a pod on Windows, whatever the build.
func (d *Doctor) checkNodeLocal(context.Context) Result {
	const name = "node-local host ports"
	if d.OSBuild == nil {
		return Result{name, Pass, "not a Windows node: nothing to say", ""}
	}
	b, err := d.OSBuild()
	if err != nil {
		return Result{name, Warn, "not checked: the Windows build is not read: " + err.Error(), ""}
	}
	if b < buildServer2022 {
		what := fmt.Sprintf("Windows build %d", b)
		if b == buildServer2019 {
			what = "Windows Server 2019 (build 17763)"
		}
		return Result{name, Warn, what + " lacks the OS half of a pod reaching its own node's hostIP:hostPort (AKS 3620): " +
			"a pod sending to status.hostIP:hostPort on its own node (a node-local agent) may get no answer; other nodes and clients outside reach the port",
			"send node-local traffic to the agent's pod IP or a Service with internalTrafficPolicy: Local, or move to Windows Server 2022 or later"}
	}
	return Result{name, Pass, fmt.Sprintf("Windows build %d: a pod may reach its own node's hostIP:hostPort where the CNI routes it (LocalRoutedVip); "+
		"127.0.0.1:hostPort is no path to a pod (docs/real-node.md has the checks to run)", b), ""}
}

// checkPodSecurity says how the annotation meets Pod Security, from the
// configuration: checked, off, or refused on every pod (nothing to read
// namespace labels from).
func (d *Doctor) checkPodSecurity(context.Context) Result {
	const name = "Pod Security"
	a := d.Config.Admission
	switch {
	case !d.Config.Plugin.UsesMappings(config.MappingsAnnotations):
		return Result{name, Pass, "the annotation is not a mapping source (plugin.mapping_sources)", ""}
	case a.PodSecurity == config.PodSecurityOff:
		return Result{name, Warn, "not checked (admission.pod_security = \"off\"): the annotation gets host ports in any namespace the admission rules allow",
			"set admission.pod_security = \"enforce\" unless another policy engine guards the annotation"}
	case !d.Config.Kubernetes.Enabled:
		// the defaults of a service install: hostPort is mapped, so the
		// node is fit; the annotation needs one step, said here
		return Result{name, Warn, "hostPort is mapped; every pod's port-mappings annotation is refused until the plugin can read the namespaces' Pod Security levels, which needs [kubernetes]",
			"the one step for the annotation: give the plugin an API server: [kubernetes] enabled = true, with kubeconfig = 'C:\\ProgramData\\nri-hcn-portmap\\kubeconfig' " +
				"for the service (its own ServiceAccount's token, docs/kubernetes.md); the chart does it. admission.pod_security = \"off\" instead only where another policy engine guards the annotation"}
	}
	if a.PodSecurityDefaultLevel == config.LevelPrivileged {
		return Result{name, Warn, "enforced; an unlabelled namespace counts as privileged (admission.pod_security_default_level): " +
			"the annotation gets host ports there, as the operator says the cluster's own default allows",
			"keep it only where the API server's Pod Security default (defaults.enforce) is privileged and no other engine guards unlabelled namespaces"}
	}
	return Result{name, Pass, fmt.Sprintf("enforced: the annotation gets host ports only in namespaces labelled privileged "+
		"(an unlabelled namespace counts as %s: admission.pod_security_default_level)", a.PodSecurityDefaultLevel), ""}
}

// checkNetworkPolicy says how host ports meet the cluster's NetworkPolicy:
// checked, off (in the words run and the chart's notes use), or no host
// port mapped (nothing to read policies from, or a kind served the plugin
// does not evaluate).
func (d *Doctor) checkNetworkPolicy(ctx context.Context) Result {
	const name = "NetworkPolicy"
	mode := d.Config.Admission.NetworkPolicy
	switch {
	case mode == config.NetworkPolicyOff:
		return Result{name, Warn, config.NetworkPolicyOffSays,
			`set admission.network_policy = "kubernetes" unless no NetworkPolicy needs to filter this node's host ports`}
	case !d.Config.Kubernetes.Enabled:
		return Result{name, Fail, "no host port is mapped: the plugin cannot read the cluster's NetworkPolicies, which decide whether a host port may " +
			"let anyone in (no NetworkPolicy engine filters the plugin's endpoint)",
			"give the plugin an API server ([kubernetes] enabled = true, docs/kubernetes.md; the chart does it), or set " +
				`admission.network_policy = "off" where no NetworkPolicy needs to filter host ports`}
	case mode == config.NetworkPolicyKubernetes && d.PolicyKinds != nil:
		kinds, err := d.PolicyKinds(ctx)
		switch {
		case err != nil:
			return Result{name, Warn, "cannot tell which policy kinds the API server serves: " + err.Error(), "check that the API server answers"}
		case len(kinds) > 0:
			return Result{name, Fail, "no host port is mapped: the API server serves " + strings.Join(kinds, ", ") +
				", policy kinds the plugin does not evaluate, which may isolate a pod",
				`set admission.network_policy = "kubernetes-only" if none of them selects a pod with host ports`}
		}
	}
	return Result{name, Pass, "host ports are mapped only where the Kubernetes NetworkPolicies selecting the pod admit every source to the port" +
		map[bool]string{true: " (other policy kinds: the operator says none selects a pod with host ports)"}[mode == config.NetworkPolicyKubernetesOnly], ""}
}

// checkNodeRestriction says whether an admission policy keeps the plugin's
// token to its own node's pods (the chart's node-restriction policy,
// Kubernetes 1.30+): without it, RBAC alone holds the token, to every
// node's pods.
func (d *Doctor) checkNodeRestriction(ctx context.Context) Result {
	const name = "Node restriction"
	if !d.Config.Kubernetes.Enabled || d.NodeRestriction == nil {
		return Result{name, Pass, "no API server configured: the plugin writes nothing there", ""}
	}
	held, err := d.NodeRestriction(ctx)
	switch {
	case err != nil:
		return Result{name, Warn, "cannot tell whether a policy holds the plugin's token to this node's pods: " + err.Error(),
			"check that the API server answers and the plugin's ClusterRole lets it create events"}
	case !held:
		return Result{name, Warn, "no admission policy holds the plugin's token: it may write the condition and events of every node's pods " +
			"(Kubernetes before 1.30, or admissionPolicies.nodeRestriction=false)",
			"on Kubernetes 1.30+, install the chart's node-restriction policy (admissionPolicies.nodeRestriction=true), or the kustomize component"}
	}
	return Result{name, Pass, "the API server's node-restriction policy holds the plugin's token to this node's pods", ""}
}

// Write prints the report as a table (a fix under its row) or JSON.
func Write(w io.Writer, r Report, format string) error {
	if format == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CHECK\tRESULT\tDETAIL")
	for _, x := range r.Results {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", x.Check, strings.ToUpper(string(x.Status)), x.Detail)
		if x.Fix != "" {
			fmt.Fprintf(tw, "\t\tfix: %s\n", x.Fix)
		}
	}
	verdict := "fit: no check failed"
	if !r.Fit() {
		verdict = "NOT fit: fix the failed checks"
	}
	fmt.Fprintln(tw, "\t\t"+verdict)
	return tw.Flush()
}
