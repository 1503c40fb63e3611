// Package admission decides which pods may get which host ports. The plugin
// acts with full rights on the node on behalf of pod annotations, which
// Kubernetes PodSecurity admission does not inspect, so it enforces a policy
// of its own: namespaces and an optional label selector say which pods may
// have host ports, ranges and host IPs say which, and a deny list wins over
// everything.
package admission

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
)

// Rules is the policy as written in the configuration file.
type Rules struct {
	// Namespaces whose pods may have host ports; "*" allows every namespace.
	Namespaces []string `toml:"namespaces"`
	// PodSelector, when set, must match the pod's labels; Kubernetes label
	// selector syntax: "key=value,key!=value,key,!key,key in (a,b),key notin (c)".
	PodSelector string `toml:"pod_selector"`
	// HostPortRanges the host port must fall in: "1024-65535", "8080".
	HostPortRanges []string `toml:"host_port_ranges"`
	// HostIPs (addresses or CIDRs) the host IP must fall in; empty allows
	// any. A mapping on every address needs 0.0.0.0/0 (IPv4) or ::/0 (IPv6).
	HostIPs []string `toml:"host_ips"`
	// Deny lists host ports no pod may have: "3389", "5985-5986/tcp".
	Deny []string `toml:"deny"`
}

// DefaultRules protect the node: no host port below 1024, and none of the
// Windows management and Kubernetes node ports.
func DefaultRules() Rules {
	return Rules{
		Namespaces:     []string{"*"},
		HostPortRanges: []string{"1024-65535"},
		Deny:           DefaultDeny(),
	}
}

// DefaultDeny: RDP (3389), WinRM over HTTP and HTTPS (5985-5986), the WinRM
// internal listener (47001), kubelet healthz, kube-proxy metrics and the
// kubelet API (10248-10250), kubelet read-only and kube-proxy health
// (10255-10256); TCP and UDP.
func DefaultDeny() []string {
	return []string{"3389", "5985-5986", "47001", "10248-10250", "10255-10256"}
}

// ErrDenied wraps every admission denial.
var ErrDenied = errors.New("denied by the host-port admission policy")

// Denial says which mapping which rule denied.
type Denial struct {
	Mapping string // the mapping as host:port/proto, or "" for the whole pod
	Rule    string // the rule, as written in the configuration
}

func (d *Denial) Error() string {
	if d.Mapping == "" {
		return fmt.Sprintf("host ports %s: rule %s", ErrDenied, d.Rule)
	}
	return fmt.Sprintf("mapping %s %s: rule %s", d.Mapping, ErrDenied, d.Rule)
}

func (d *Denial) Unwrap() error { return ErrDenied }

type portRange struct {
	lo, hi uint16
	proto  hcn.Protocol // 0 = both
	text   string
}

func (r portRange) has(m hcn.PortMapping) bool {
	return m.HostPort >= r.lo && m.HostPort <= r.hi && (r.proto == 0 || r.proto == m.Protocol)
}

// Policy is compiled Rules.
type Policy struct {
	anyNamespace bool
	namespaces   map[string]bool
	selector     labels.Selector // nil: every pod
	selectorText string
	ranges       []portRange
	hostIPs      []netip.Prefix
	deny         []portRange
	dualStack    bool
}

// WithDualStack makes a mapping without host IP count as binding every IPv6
// address too (it gets an IPv6 policy), so host_ips must then cover ::/0.
func (p *Policy) WithDualStack(on bool) *Policy {
	c := *p
	c.dualStack = on
	return &c
}

// Compile checks and compiles rules. Errors name the key and the bad value.
func Compile(r Rules) (*Policy, error) {
	p := &Policy{namespaces: map[string]bool{}, selectorText: r.PodSelector}
	var errs []error
	bad := func(key, value, why string) { errs = append(errs, fmt.Errorf("%s = %q: %s", key, value, why)) }
	for _, ns := range r.Namespaces {
		switch {
		case ns == "*":
			p.anyNamespace = true
		case ns == "" || strings.ContainsAny(ns, " ,*"):
			bad("admission.namespaces", ns, "not a namespace name (or *)")
		default:
			p.namespaces[ns] = true
		}
	}
	if r.PodSelector != "" {
		sel, err := labels.Parse(r.PodSelector)
		if err != nil {
			bad("admission.pod_selector", r.PodSelector, err.Error())
		}
		p.selector = sel
	}
	for _, s := range r.HostPortRanges {
		pr, err := parseRange(s)
		if err != nil {
			bad("admission.host_port_ranges", s, err.Error())
			continue
		}
		p.ranges = append(p.ranges, pr)
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
		p.hostIPs = append(p.hostIPs, pfx.Masked())
	}
	for _, s := range r.Deny {
		pr, err := parseRange(s)
		if err != nil {
			bad("admission.deny", s, err.Error())
			continue
		}
		p.deny = append(p.deny, pr)
	}
	return p, errors.Join(errs...)
}

// parseRange parses "PORT", "LO-HI", optionally followed by "/tcp" or "/udp".
func parseRange(s string) (portRange, error) {
	pr := portRange{text: s}
	body, proto, hasProto := strings.Cut(strings.TrimSpace(s), "/")
	if hasProto {
		switch strings.ToLower(proto) {
		case "tcp":
			pr.proto = hcn.TCP
		case "udp":
			pr.proto = hcn.UDP
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
	pr.lo, pr.hi = uint16(l), uint16(h)
	return pr, nil
}

// Pod is what admission looks at.
type Pod struct {
	Namespace string
	Labels    map[string]string
}

// Admit checks every mapping of a pod; the first denial is returned as a
// *Denial naming the mapping and the rule. The deny list wins over every
// allow rule.
func (p *Policy) Admit(pod Pod, mappings []hcn.PortMapping) error {
	if len(mappings) == 0 {
		return nil
	}
	for _, m := range mappings {
		for i, d := range p.deny {
			if d.has(m) {
				return &Denial{Mapping: m.String(), Rule: fmt.Sprintf("admission.deny[%d] = %q", i, d.text)}
			}
		}
	}
	if !p.anyNamespace && !p.namespaces[pod.Namespace] {
		return &Denial{Rule: fmt.Sprintf("admission.namespaces (namespace %q is not listed)", pod.Namespace)}
	}
	if !p.matches(pod.Labels) {
		return &Denial{Rule: fmt.Sprintf("admission.pod_selector = %q (the pod's labels do not match)", p.selectorText)}
	}
	for _, m := range mappings {
		if !slices.ContainsFunc(p.ranges, func(r portRange) bool { return r.has(m) }) {
			return &Denial{Mapping: m.String(), Rule: fmt.Sprintf("admission.host_port_ranges = %s (host port %d is outside)", quoteAll(p.ranges), m.HostPort)}
		}
		if len(p.hostIPs) > 0 && !p.hostIPAllowed(m.HostIP) {
			return &Denial{Mapping: m.String(), Rule: fmt.Sprintf("admission.host_ips = %s (host IP %s is outside)", quotePrefixes(p.hostIPs), hostIPText(m.HostIP))}
		}
	}
	return nil
}

func (p *Policy) matches(podLabels map[string]string) bool {
	return p.selector == nil || p.selector.Matches(labels.Set(podLabels))
}

// hostIPAllowed: a specific address must be inside a listed prefix; a
// mapping on every address (no host IP, or an unspecified one) needs the
// whole family listed.
func (p *Policy) hostIPAllowed(ip netip.Addr) bool {
	if !ip.IsValid() { // every IPv4 address, and every IPv6 address with dual stack
		return p.coversAll(true) && (!p.dualStack || p.coversAll(false))
	}
	ip = ip.Unmap()
	if ip.IsUnspecified() {
		return p.coversAll(ip.Is4())
	}
	return slices.ContainsFunc(p.hostIPs, func(pfx netip.Prefix) bool { return pfx.Contains(ip) })
}

func (p *Policy) coversAll(v4 bool) bool {
	return slices.ContainsFunc(p.hostIPs, func(pfx netip.Prefix) bool { return pfx.Bits() == 0 && pfx.Addr().Is4() == v4 })
}

func hostIPText(ip netip.Addr) string {
	if !ip.IsValid() {
		return "(every address)"
	}
	return ip.String()
}

func quoteAll(rs []portRange) string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = strconv.Quote(r.text)
	}
	return "[" + strings.Join(out, ", ") + "]"
}

func quotePrefixes(ps []netip.Prefix) string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = strconv.Quote(p.String())
	}
	return "[" + strings.Join(out, ", ") + "]"
}
