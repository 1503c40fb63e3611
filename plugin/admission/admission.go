// Package admission decides which pods may get which host ports, by the
// rules of the configuration's [admission] section (config.Admission). The plugin
// acts with full rights on the node on behalf of pod annotations, which
// Kubernetes PodSecurity admission does not inspect, so it enforces a policy
// of its own: namespaces and an optional label selector say which pods may
// have host ports, ranges and host IPs say which, and a deny list wins over
// everything (a label selector narrows it further, at the pod owner's
// discretion: the owner writes the labels). Host IPs the node keeps to
// itself (loopback, link-local, the metadata addresses) are refused
// unless named. And the annotation obeys the namespace's Pod Security level
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
	"time"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/config"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
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
	own          []config.OwnPort // the plugin's own ports: denied like deny's
	dualStack    bool
	// networkPolicy: admission.network_policy (AdmitNetwork)
	networkPolicy string
}

// WithDualStack makes a mapping without host IP count as binding every IPv6
// address too (it gets an IPv6 policy), so host_ips must then cover ::/0.
func (p *Policy) WithDualStack(on bool) *Policy {
	c := *p
	c.dualStack = on
	return &c
}

// WithNetworkPolicy is p with the NetworkPolicy mode the plugin runs
// (its cache runs, or not, as it started: a reload does not change it).
func (p *Policy) WithNetworkPolicy(mode string) *Policy {
	c := *p
	c.networkPolicy = mode
	return &c
}

// WithOwnPorts denies the plugin's own TCP ports (admin's, config.Admin
// OwnPorts), whatever they are set to, beside the deny list.
func (p *Policy) WithOwnPorts(own []config.OwnPort) *Policy {
	c := *p
	c.own = own
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
		podSecurity: rules.PodSecurity, defaultLevel: rules.DefaultLevel, exempt: map[string]bool{}, networkPolicy: rules.NetworkPolicy}
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

// AdmitRequest admits what a pod asks for that it does not hold yet:
// every mapping by the node's rules (Admit), and those of its annotation
// also by its namespace's Pod Security level (AdmitAnnotation).
func (p *Policy) AdmitRequest(pod Pod, mappings, annotated []request.PortMapping, ns *Labels) error {
	if err := p.Admit(pod, mappings); err != nil {
		return err
	}
	return p.AdmitAnnotation(pod, annotated, ns)
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
		for _, o := range p.own {
			if m.HostPort == o.Port && m.Protocol == hcn.TCP {
				return &Denial{Mapping: m.String(), Rule: fmt.Sprintf("the plugin's own port (%s = %q)", o.Key, o.Addr)}
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
		if what := sensitive(m.HostIP); what != "" && !p.names(m.HostIP) {
			return &Denial{Mapping: m.String(), Rule: fmt.Sprintf("host IP %s is %s: refused unless admission.host_ips names it", m.HostIP.Unmap(), what)}
		}
		if !slices.ContainsFunc(p.ranges, func(r config.PortRange) bool { return has(r, m) }) {
			return &Denial{Mapping: m.String(), Rule: fmt.Sprintf("admission.host_port_ranges = %s (host port %d is outside)", quoteAll(p.ranges), m.HostPort)}
		}
		if len(p.hostIPs) > 0 && !p.hostIPAllowed(m.HostIP) {
			return &Denial{Mapping: m.String(), Rule: fmt.Sprintf("admission.host_ips = %s (host IP %s is outside)", quotePrefixes(p.hostIPs), hostIPText(m.HostIP))}
		}
	}
	return nil
}

// sensitiveIPs are host IPs no pod gets unless host_ips names them: a
// mapping there reaches what the node keeps to itself (its loopback), or
// stands in front of what a pod's traffic trusts (the cloud metadata and
// Azure wire server addresses, link-local addresses).
var sensitiveIPs = []struct {
	prefix netip.Prefix
	what   string
}{
	{netip.MustParsePrefix("169.254.169.254/32"), "the cloud metadata address"},
	{netip.MustParsePrefix("fd00:ec2::254/128"), "the cloud metadata address (AWS, IPv6)"},
	{netip.MustParsePrefix("168.63.129.16/32"), "the Azure wire server"},
	{netip.MustParsePrefix("100.100.100.200/32"), "the cloud metadata address (Alibaba)"},
	{netip.MustParsePrefix("127.0.0.0/8"), "the node's loopback"},
	{netip.MustParsePrefix("::1/128"), "the node's loopback"},
	{netip.MustParsePrefix("169.254.0.0/16"), "link-local"},
	{netip.MustParsePrefix("fe80::/10"), "link-local"},
}

// sensitive says what ip is when no pod should get it by default ("" when
// it is an ordinary address, or every address).
func sensitive(ip netip.Addr) string {
	if !ip.IsValid() {
		return ""
	}
	ip = ip.Unmap()
	for _, s := range sensitiveIPs {
		if s.prefix.Contains(ip) {
			return s.what
		}
	}
	return ""
}

// names reports whether host_ips names ip: an entry other than a catch-all
// (/0) holds it.
func (p *Policy) names(ip netip.Addr) bool {
	ip = ip.Unmap()
	return slices.ContainsFunc(p.hostIPs, func(pfx netip.Prefix) bool { return pfx.Bits() > 0 && pfx.Contains(ip) })
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

// Pod Security: the annotation obeys the namespace's level.

// LabelEnforce is the namespace label that says its Pod Security level
// (k8s.io/pod-security-admission/api EnforceLevelLabel).
const LabelEnforce = "pod-security.kubernetes.io/enforce"

// ErrPodSecurity wraps every refusal of the annotation by the pod's
// namespace's Pod Security level: final for the pod (its namespace's
// labels are not the pod author's).
var ErrPodSecurity = errors.New("refused by the namespace's Pod Security level")

// ErrLevelUnknown: the namespace's level has not been read from the API
// server (not since the plugin started, or the namespace is newer than
// what the watch has shown). The annotation is refused until it is known:
// never granted by default.
var ErrLevelUnknown = errors.New("the namespace's Pod Security level is not known yet")

// Label is a namespace's pod-security.kubernetes.io/enforce label:
// Labelled false when it has none.
type Label struct {
	Value    string
	Labelled bool
}

// Labels is what the API server last said of the namespaces' enforce
// labels, as a value: its map is never changed once handed out (the cache
// that keeps them makes a new one), and At is the moment the view is of
// (a sync's start). The labels are as old as the API server's last word
// (Heard: a list, a watch event or a bookmark); older than MaxAge they
// grant nothing.
type Labels struct {
	Enforce map[string]Label
	Heard   time.Time // zero: never read
	MaxAge  time.Duration
	At      time.Time
}

// Stale says why the labels were too old to grant anything at l.At, ""
// when they were not.
func (l Labels) Stale() string {
	if l.Heard.IsZero() {
		return ""
	}
	if age := l.At.Sub(l.Heard); age > l.MaxAge {
		return fmt.Sprintf("nothing has been heard from the API server for %s, no list, event or bookmark (kubernetes.labels_max_age = %s): "+
			"the labels read before are too old to grant host ports", age.Round(time.Second), l.MaxAge)
	}
	return ""
}

// EnforceLabel is the namespace's pod-security.kubernetes.io/enforce label
// (labelled false when it has none); unknown says why it is not known (""
// when it is): the namespace has not been read, or what was read is too old
// to grant anything (the API server unreachable).
func (l Labels) EnforceLabel(namespace string) (string, bool, string) {
	if why := l.Stale(); why != "" {
		return "", false, why
	}
	v, ok := l.Enforce[namespace]
	if !ok {
		return "", false, "its labels have not been read from the API server yet"
	}
	return v.Value, v.Labelled, ""
}

// PodSecurityError is the annotation refused by the namespace's level.
type PodSecurityError struct {
	Namespace string
	Level     string // the level in force; "" when it cannot be checked
	From      string // where the level comes from (or why it cannot be checked)
}

func (e *PodSecurityError) Error() string {
	if e.Level == "" {
		return fmt.Sprintf("annotation %s %s: it cannot be checked for namespace %q: %s",
			request.AnnotationPortMappings, ErrPodSecurity, e.Namespace, e.From)
	}
	return fmt.Sprintf("annotation %s %s: namespace %q enforces %q (%s), which forbids host ports as it forbids hostPort; "+
		"run the pod in a namespace whose level is privileged, or have the namespace's owners label it %s=privileged",
		request.AnnotationPortMappings, ErrPodSecurity, e.Namespace, e.Level, e.From, LabelEnforce)
}

func (e *PodSecurityError) Unwrap() error { return ErrPodSecurity }

// LevelUnknownError is the annotation held back while the namespace's
// level is not known.
type LevelUnknownError struct {
	Namespace string
	Why       string
}

func (e *LevelUnknownError) Error() string {
	return fmt.Sprintf("annotation %s not mapped yet: %s of namespace %q (%s); it is mapped once the level is known and allows it",
		request.AnnotationPortMappings, ErrLevelUnknown, e.Namespace, e.Why)
}

func (e *LevelUnknownError) Unwrap() error { return ErrLevelUnknown }

// PodSecurityChecked says whether the annotation obeys the namespaces'
// levels (admission.pod_security = "enforce").
func (p *Policy) PodSecurityChecked() bool { return p.podSecurity }

// AdmitAnnotation checks the mappings the pod's annotation asks for
// against its namespace's Pod Security enforce level, as the API server
// checks a hostPort before the pod exists: privileged allows them,
// baseline and restricted forbid them. A namespace without the label has
// admission.pod_security_default_level; a label that names no level is
// taken as restricted, as Pod Security takes it (ParseLevel,
// k8s.io/pod-security-admission/api/helpers.go). ns nil: the plugin cannot
// read namespaces (kubernetes.enabled = false), and the annotation is
// refused, saying how to turn the check off.
func (p *Policy) AdmitAnnotation(pod Pod, mappings []request.PortMapping, ns *Labels) error {
	if !p.podSecurity || len(mappings) == 0 || p.exempt[pod.Namespace] {
		return nil
	}
	if ns == nil {
		return &PodSecurityError{Namespace: pod.Namespace,
			From: `kubernetes.enabled = false: the plugin cannot read namespace labels; enable [kubernetes], or set admission.pod_security = "off" where another policy engine guards the annotation`}
	}
	value, labelled, unknown := ns.EnforceLabel(pod.Namespace)
	if unknown != "" {
		return &LevelUnknownError{Namespace: pod.Namespace, Why: unknown}
	}
	level, from := p.defaultLevel, fmt.Sprintf("it has no %s label: admission.pod_security_default_level = %q", LabelEnforce, p.defaultLevel)
	if labelled {
		level, from = value, fmt.Sprintf("label %s=%s", LabelEnforce, value)
		if !slices.Contains(config.Levels(), value) {
			level, from = config.LevelRestricted, fmt.Sprintf("label %s=%s names no level, which Pod Security takes as restricted", LabelEnforce, value)
		}
	}
	if level == config.LevelPrivileged {
		return nil
	}
	return &PodSecurityError{Namespace: pod.Namespace, Level: level, From: from}
}
