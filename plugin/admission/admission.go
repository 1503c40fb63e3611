// Package admission decides which pods may get which host ports, by the
// rules of the configuration's [admission] section (config.Admission). The plugin
// acts with full rights on the node on behalf of pod annotations, which
// Kubernetes PodSecurity admission does not inspect, so it enforces a policy
// of its own: namespaces and an optional label selector say which pods may
// have host ports, ranges and host IPs say which, and a deny list wins over
// everything. And the annotation obeys the namespace's Pod Security level
// as Kubernetes' hostPort does (AdmitAnnotation): baseline and restricted
// forbid host ports.
package admission

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/config"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/request"
)

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

func has(r config.PortRange, m request.PortMapping) bool {
	return m.HostPort >= r.Lo && m.HostPort <= r.Hi && (r.Proto == "" || r.Proto == m.Protocol.String())
}

// Policy is the configuration's admission rules, compiled.
type Policy struct {
	podSecurity  bool
	defaultLevel string
	exempt       map[string]bool
	anyNamespace bool
	namespaces   map[string]bool
	selector     labels.Selector // nil: every pod
	selectorText string
	ranges       []config.PortRange
	hostIPs      []netip.Prefix
	deny         []config.PortRange
	dualStack    bool
}

// WithDualStack makes a mapping without host IP count as binding every IPv6
// address too (it gets an IPv6 policy), so host_ips must then cover ::/0.
func (p *Policy) WithDualStack(on bool) *Policy {
	c := *p
	c.dualStack = on
	return &c
}

// Compile checks and compiles the configuration's rules. Errors name the
// key and the bad value.
func Compile(r config.Admission) (*Policy, error) {
	rules, err := r.Parse()
	if err != nil {
		return nil, err
	}
	p := &Policy{anyNamespace: rules.AnyNamespace, namespaces: map[string]bool{}, selectorText: rules.PodSelector,
		ranges: rules.Ranges, hostIPs: rules.HostIPs, deny: rules.Deny,
		podSecurity: rules.PodSecurity, defaultLevel: rules.DefaultLevel, exempt: map[string]bool{}}
	for _, ns := range rules.Namespaces {
		p.namespaces[ns] = true
	}
	for _, ns := range rules.ExemptNamespaces {
		p.exempt[ns] = true
	}
	if rules.PodSelector != "" {
		if p.selector, err = labels.Parse(rules.PodSelector); err != nil {
			return nil, fmt.Errorf("admission.pod_selector = %q: %w", rules.PodSelector, err)
		}
	}
	return p, nil
}

// Pod is what admission looks at.
type Pod struct {
	Namespace string
	Labels    map[string]string
}

// Admit checks every mapping of a pod; the first denial is returned as a
// *Denial naming the mapping and the rule. The deny list wins over every
// allow rule.
func (p *Policy) Admit(pod Pod, mappings []request.PortMapping) error {
	if len(mappings) == 0 {
		return nil
	}
	for _, m := range mappings {
		for i, d := range p.deny {
			if has(d, m) {
				return &Denial{Mapping: m.String(), Rule: fmt.Sprintf("admission.deny[%d] = %q", i, d.Text)}
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
		if !slices.ContainsFunc(p.ranges, func(r config.PortRange) bool { return has(r, m) }) {
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

func quoteAll(rs []config.PortRange) string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = strconv.Quote(r.Text)
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
