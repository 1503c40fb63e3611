package config

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/labels"
)

// Admission is the [admission] section: which pods may have which host
// ports (enforced by package plugin/admission).
type Admission struct {
	// Namespaces whose pods may have host ports; "*" allows every namespace.
	Namespaces []string `toml:"namespaces"`
	// PodSelector, when set, must match the pod's labels; Kubernetes label
	// selector syntax: "key=value,key!=value,key,!key,key in (a,b),key notin (c)".
	// A convenience, not a boundary: the pod's owner writes its labels
	// (namespaces and Pod Security are the boundaries).
	PodSelector string `toml:"pod_selector"`
	// HostPortRanges the host port must fall in: "1024-65535", "8080".
	HostPortRanges []string `toml:"host_port_ranges"`
	// HostIPs (addresses or CIDRs) the host IP must fall in; empty allows
	// any. A mapping on every address needs 0.0.0.0/0 (IPv4) or ::/0 (IPv6).
	// The node's loopback, link-local addresses and the cloud metadata and
	// Azure wire server addresses are refused unless an entry other than a
	// catch-all (/0) names them.
	HostIPs []string `toml:"host_ips"`
	// Deny lists host ports no pod may have: "3389", "5985-5986/tcp".
	Deny []string `toml:"deny"`
	// PodSecurity: "enforce" (the annotation's host ports only for pods
	// of namespaces whose Pod Security enforce level is privileged, as
	// Kubernetes does for hostPort) or "off" (another policy engine guards
	// the annotation).
	PodSecurity string `toml:"pod_security"`
	// PodSecurityDefaultLevel is the level of a namespace without the
	// pod-security.kubernetes.io/enforce label: the API server's
	// admission configuration says it (defaults.enforce), which the plugin
	// cannot read. A level it cannot read grants nothing: baseline by
	// default, so the annotation needs a namespace labelled privileged
	// unless the operator says the cluster's default is privileged
	// (Kubernetes' own, where no AdmissionConfiguration sets another).
	PodSecurityDefaultLevel string `toml:"pod_security_default_level"`
	// PodSecurityExemptNamespaces mirrors the API server's Pod Security
	// exemptions.namespaces: the level of these namespaces is not checked.
	PodSecurityExemptNamespaces []string `toml:"pod_security_exempt_namespaces"`
	// NetworkPolicy says how a host port meets the cluster's NetworkPolicy
	// (the plugin's endpoint is one no policy engine filters): "kubernetes"
	// maps a port only where the Kubernetes NetworkPolicies that select the
	// pod admit every source to it, and refuses host ports while the API
	// server serves a policy kind the plugin does not evaluate;
	// "kubernetes-only" evaluates Kubernetes NetworkPolicy alone, the
	// operator stating that no other kind served selects a pod with host
	// ports; "off": the operator states that host ports on this node are
	// not filtered by any policy.
	NetworkPolicy string `toml:"network_policy"`
}

// Pod Security modes of the annotation (admission.pod_security).
const (
	PodSecurityEnforce = "enforce"
	PodSecurityOff     = "off"
)

// NetworkPolicy modes (admission.network_policy).
const (
	NetworkPolicyKubernetes     = "kubernetes"
	NetworkPolicyKubernetesOnly = "kubernetes-only"
	NetworkPolicyOff            = "off"
)

// NetworkPolicyOffSays is what run, doctor and the chart's notes say of
// admission.network_policy = "off", in these words.
const NetworkPolicyOffSays = `host ports on this node are not filtered by any NetworkPolicy (admission.network_policy = "off"): ` +
	`anyone who can reach the node reaches a mapped port, whatever the pod's policies say`

// Pod Security levels, as Kubernetes names them
// (k8s.io/pod-security-admission/api).
const (
	LevelPrivileged = "privileged"
	LevelBaseline   = "baseline"
	LevelRestricted = "restricted"
)

// Levels lists the Pod Security levels, from the least restricted.
func Levels() []string { return []string{LevelPrivileged, LevelBaseline, LevelRestricted} }

// DefaultAdmission protects the node: no host port below 1024, and none of the
// Windows management and Kubernetes node ports.
func DefaultAdmission() Admission {
	return Admission{
		Namespaces:     []string{"*"},
		HostPortRanges: []string{"1024-65535"},
		HostIPs:        []string{},
		Deny:           DefaultDeny(),
		PodSecurity:    PodSecurityEnforce,
		// the cluster's default cannot be read: it grants nothing
		// (managed and hardened clusters set baseline; an unlabelled
		// namespace may also be guarded by Kyverno or Gatekeeper, which
		// look at hostPort alone)
		PodSecurityDefaultLevel:     LevelBaseline,
		PodSecurityExemptNamespaces: []string{},
		// a port the policies do not admit to everyone is not mapped: the
		// open mode is the operator's to state
		NetworkPolicy: NetworkPolicyKubernetes,
	}
}

// DefaultDeny: RDP (3389), WinRM over HTTP and HTTPS (5985-5986), the WinRM
// internal listener (47001), kubelet healthz, kube-proxy metrics and the
// kubelet API (10248-10250), kubelet read-only and kube-proxy health
// (10255-10256); TCP and UDP.
func DefaultDeny() []string {
	return []string{"3389", "5985-5986", "47001", "10248-10250", "10255-10256"}
}

// PortRange is a parsed host_port_ranges or deny entry.
type PortRange struct {
	Lo, Hi uint16
	Proto  string // "tcp", "udp", or "" for both
	Text   string // as written
}

// AdmissionRules is the section checked and parsed.
type AdmissionRules struct {
	AnyNamespace bool
	Namespaces   []string
	PodSelector  string // a valid Kubernetes label selector, or ""
	Ranges       []PortRange
	HostIPs      []netip.Prefix
	Deny         []PortRange
	// PodSecurity: the annotation obeys the namespace's level
	PodSecurity      bool
	DefaultLevel     string
	ExemptNamespaces []string
	// NetworkPolicy: the NetworkPolicy mode, checked
	NetworkPolicy string
}

// Parse checks the rules. Errors name the key and the bad value.
func (r Admission) Parse() (AdmissionRules, error) {
	var out AdmissionRules
	var errs []error
	bad := func(key, value, why string) { errs = append(errs, fmt.Errorf("%s = %q: %s", key, value, why)) }
	for _, ns := range r.Namespaces {
		switch {
		case ns == "*":
			out.AnyNamespace = true
		case ns == "" || strings.ContainsAny(ns, " ,*"):
			bad("admission.namespaces", ns, "not a namespace name (or *)")
		default:
			out.Namespaces = append(out.Namespaces, ns)
		}
	}
	if r.PodSelector != "" {
		if _, err := labels.Parse(r.PodSelector); err != nil {
			bad("admission.pod_selector", r.PodSelector, err.Error())
		}
		out.PodSelector = r.PodSelector
	}
	for _, s := range r.HostPortRanges {
		pr, err := parseRange(s)
		if err != nil {
			bad("admission.host_port_ranges", s, err.Error())
			continue
		}
		out.Ranges = append(out.Ranges, pr)
	}
	for _, s := range r.HostIPs {
		pfx, err := netip.ParsePrefix(s)
		if err != nil {
			a, aerr := netip.ParseAddr(s)
			if aerr != nil {
				bad("admission.host_ips", s, "not an IP address or CIDR prefix")
				continue
			}
			pfx = netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen())
		}
		out.HostIPs = append(out.HostIPs, pfx.Masked())
	}
	for _, s := range r.Deny {
		pr, err := parseRange(s)
		if err != nil {
			bad("admission.deny", s, err.Error())
			continue
		}
		out.Deny = append(out.Deny, pr)
	}
	for _, kv := range [][2]string{{"admission.pod_security", r.PodSecurity}, {"admission.pod_security_default_level", r.PodSecurityDefaultLevel},
		{"admission.network_policy", r.NetworkPolicy}} {
		if l, _ := LimitOf(kv[0]); !slices.Contains(l.Words, kv[1]) {
			bad(kv[0], kv[1], l.Rule())
		}
	}
	out.PodSecurity, out.NetworkPolicy = r.PodSecurity == PodSecurityEnforce, r.NetworkPolicy
	if slices.Contains(Levels(), r.PodSecurityDefaultLevel) {
		out.DefaultLevel = r.PodSecurityDefaultLevel
	}
	for _, ns := range r.PodSecurityExemptNamespaces {
		if ns == "" || strings.ContainsAny(ns, " ,*") {
			bad("admission.pod_security_exempt_namespaces", ns, "not a namespace name")
			continue
		}
		out.ExemptNamespaces = append(out.ExemptNamespaces, ns)
	}
	return out, errors.Join(errs...)
}

// parseRange parses "PORT", "LO-HI", optionally followed by "/tcp" or "/udp".
func parseRange(s string) (PortRange, error) {
	pr := PortRange{Text: s}
	body, proto, hasProto := strings.Cut(strings.TrimSpace(s), "/")
	if hasProto {
		switch p := strings.ToLower(proto); p {
		case "tcp", "udp":
			pr.Proto = p
		default:
			return pr, fmt.Errorf("protocol %q: want tcp or udp", proto)
		}
	}
	lo, hi, isRange := strings.Cut(body, "-")
	if !isRange {
		hi = lo
	}
	l, err1 := strconv.Atoi(strings.TrimSpace(lo))
	h, err2 := strconv.Atoi(strings.TrimSpace(hi))
	switch {
	case err1 != nil || err2 != nil:
		return pr, errors.New("want PORT or LOW-HIGH within 1-65535, optionally /tcp or /udp")
	case l < 1 || h > 65535:
		return pr, errors.New("ports must be within 1-65535")
	case l > h:
		return pr, fmt.Errorf("the low port %d is above the high port %d", l, h)
	}
	pr.Lo, pr.Hi = uint16(l), uint16(h)
	return pr, nil
}
