package plugin

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	k8sjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
)

// AnnotationPortMappings is the pod annotation that asks for port mappings.
const AnnotationPortMappings = "hcn.nri.io/port-mappings"

// ErrBadMapping is wrapped by every port-mapping parse error.
var ErrBadMapping = errors.New("invalid port mapping")

// MappingError names the offending entry of a port-mapping list.
type MappingError struct {
	Entry  string // the entry as written (compact form) or its index (list form)
	Reason string
}

func (e *MappingError) Error() string { return fmt.Sprintf("entry %s: %s", e.Entry, e.Reason) }
func (e *MappingError) Unwrap() error { return ErrBadMapping }

// Limits bound what one pod can ask for, so that no annotation a pod author
// writes can hold up the runtime's node-wide NRI lock or ask HNS for an
// endpoint with thousands of policies. Zero means no limit.
type Limits struct {
	MaxMappings int // mappings per pod, every source counted (plugin.max_mappings_per_pod)
	MaxBytes    int // bytes of the annotation value (plugin.max_annotation_bytes)
}

// Default limits: real pods map a handful of host ports; 64 is generous and
// keeps one endpoint's policy list small for HNS. 16 KiB holds 64 entries
// in the most verbose form (a YAML list with host IPs, about 120 bytes each).
const (
	DefaultMaxMappings = 64
	DefaultMaxBytes    = 16 << 10
)

// DefaultLimits are the limits of a default configuration.
func DefaultLimits() Limits {
	return Limits{MaxMappings: DefaultMaxMappings, MaxBytes: DefaultMaxBytes}
}

// ErrTooLarge is wrapped (besides ErrBadMapping) by the errors of a request
// over the limits.
var ErrTooLarge = errors.New("port-mapping request over the limit")

// LimitError says which limit a request exceeds, by how much.
type LimitError struct {
	What  string // "entries" or "bytes"
	Count int
	Limit int
	Key   string // the configuration key of the limit
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("%d %s, more than the limit of %d (%s)", e.Count, e.What, e.Limit, e.Key)
}

// Unwrap makes a LimitError both a bad mapping and a too-large request.
func (e *LimitError) Unwrap() []error { return []error{ErrBadMapping, ErrTooLarge} }

// Configuration keys of the limits, named in errors.
const (
	KeyMaxMappings = "plugin.max_mappings_per_pod"
	KeyMaxBytes    = "plugin.max_annotation_bytes"
)

// checkCount rejects n mappings over the limit.
func (l Limits) checkCount(n int) error {
	if l.MaxMappings > 0 && n > l.MaxMappings {
		return &LimitError{What: "entries", Count: n, Limit: l.MaxMappings, Key: KeyMaxMappings}
	}
	return nil
}

// ParsePortMappings parses the value of AnnotationPortMappings. Two forms:
//
//	compact, comma-separated: 8080:80, 8080:80/udp, 10.0.0.4:8443:443/tcp, [fd00::4]:8080:80
//	a JSON or YAML list: [{"containerPort":80,"hostPort":8080,"protocol":"TCP","hostIP":"10.0.0.4"}]
//
// An empty value yields no mappings. Duplicate or overlapping mappings are
// rejected. The limits are checked before any per-entry work (the size
// first, then the number of entries); the cost is linear in the value.
func ParsePortMappings(value string, lim Limits) ([]hcn.PortMapping, error) {
	if lim.MaxBytes > 0 && len(value) > lim.MaxBytes {
		return nil, &LimitError{What: "bytes", Count: len(value), Limit: lim.MaxBytes, Key: KeyMaxBytes}
	}
	v := strings.TrimSpace(value)
	if v == "" {
		return nil, nil
	}
	var (
		out []hcn.PortMapping
		err error
	)
	if isListForm(v) {
		out, err = parseList(v, lim)
	} else {
		out, err = parseCompact(v, lim)
	}
	if err != nil {
		return nil, err
	}
	if err := CheckOverlaps(out, nil); err != nil {
		return nil, err
	}
	return out, nil
}

// isListForm tells a JSON/YAML list from a compact entry that starts with a
// bracketed IPv6 address.
func isListForm(v string) bool {
	if v == "-" || strings.HasPrefix(v, "- ") || strings.HasPrefix(v, "-\n") {
		return true // a YAML block list
	}
	if rest, ok := strings.CutPrefix(v, "["); ok {
		rest = strings.TrimSpace(rest)
		return rest == "" || rest[0] == '{' || rest[0] == ']'
	}
	return false
}

func parseCompact(v string, lim Limits) ([]hcn.PortMapping, error) {
	if err := lim.checkCount(strings.Count(v, ",") + 1); err != nil {
		return nil, err
	}
	out := make([]hcn.PortMapping, 0, strings.Count(v, ",")+1)
	for _, raw := range strings.Split(v, ",") {
		entry := strings.TrimSpace(raw)
		m, reason := parseCompactEntry(entry)
		if reason != "" {
			return nil, &MappingError{Entry: strconv.Quote(entry), Reason: reason}
		}
		out = append(out, m)
	}
	return out, nil
}

func parseCompactEntry(entry string) (hcn.PortMapping, string) {
	var m hcn.PortMapping
	if entry == "" {
		return m, "empty entry (stray comma?)"
	}
	body, proto, hasProto := strings.Cut(entry, "/")
	m.Protocol = hcn.TCP
	if hasProto {
		p, reason := parseProtocol(proto)
		if reason != "" {
			return m, reason
		}
		m.Protocol = p
	}
	var hostIP, ports string
	if strings.HasPrefix(body, "[") {
		end := strings.Index(body, "]")
		if end < 0 {
			return m, "unclosed '[' around the host IP"
		}
		hostIP = body[1:end]
		rest, ok := strings.CutPrefix(body[end+1:], ":")
		if !ok {
			return m, "expected ':' after the bracketed host IP"
		}
		ports = rest
		if hostIP == "" {
			return m, "empty host IP in brackets"
		}
	} else {
		parts := strings.Split(body, ":")
		switch len(parts) {
		case 2:
			ports = body
		case 3:
			hostIP, ports = parts[0], parts[1]+":"+parts[2]
		default:
			return m, "want [hostIP:]hostPort:containerPort[/protocol] (IPv6 host IPs go in brackets)"
		}
	}
	if hostIP != "" {
		ip, reason := parseHostIP(hostIP)
		if reason != "" {
			return m, reason
		}
		if !strings.HasPrefix(body, "[") && ip.Is6() {
			return m, "an IPv6 host IP must be written in brackets"
		}
		m.HostIP = ip
	}
	hp, cp, ok := strings.Cut(ports, ":")
	if !ok || strings.Contains(cp, ":") {
		return m, "want hostPort:containerPort"
	}
	var reason string
	if m.HostPort, reason = parsePort("host port", hp); reason != "" {
		return m, reason
	}
	if m.ContainerPort, reason = parsePort("container port", cp); reason != "" {
		return m, reason
	}
	return m, ""
}

func parsePort(what, s string) (uint16, string) {
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil {
		return 0, fmt.Sprintf("%s %q is not a number", what, s)
	}
	return checkPort(what, n)
}

func checkPort(what string, n int) (uint16, string) {
	if n < 1 || n > 65535 {
		return 0, fmt.Sprintf("%s %d is outside 1-65535", what, n)
	}
	return uint16(n), ""
}

func parseProtocol(s string) (hcn.Protocol, string) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "tcp":
		return hcn.TCP, ""
	case "udp":
		return hcn.UDP, ""
	case "sctp":
		return 0, "protocol SCTP is not supported by HNS port mappings (only TCP and UDP)"
	case "":
		return 0, "empty protocol after '/'"
	}
	return 0, fmt.Sprintf("unknown protocol %q (want tcp or udp)", s)
}

func parseHostIP(s string) (netip.Addr, string) {
	ip, err := netip.ParseAddr(strings.TrimSpace(s))
	if err != nil {
		return netip.Addr{}, fmt.Sprintf("host IP %q is not an IP address", s)
	}
	if ip.Zone() != "" {
		return netip.Addr{}, fmt.Sprintf("host IP %q: zones are not supported", s)
	}
	if ip.IsMulticast() {
		return netip.Addr{}, fmt.Sprintf("host IP %q is a multicast address", s)
	}
	return ip.Unmap(), ""
}

// listEntry is one element of the list form. Pointers tell missing from zero.
type listEntry struct {
	ContainerPort *int   `json:"containerPort"`
	HostPort      *int   `json:"hostPort"`
	Protocol      string `json:"protocol"`
	HostIP        string `json:"hostIP"`
}

func parseList(v string, lim Limits) ([]hcn.PortMapping, error) {
	var entries []listEntry
	bad := func(err error) error {
		return &MappingError{Entry: "list", Reason: "not a valid JSON/YAML list of {containerPort, hostPort, protocol, hostIP}: " + err.Error()}
	}
	// JSON, the common form, is decoded directly; YAML goes through the
	// (much slower) YAML-to-JSON conversion only after its top-level entries
	// ("-" at the start of a line) are counted against the limit.
	j := []byte(v)
	if !strings.HasPrefix(v, "[") || !json.Valid(j) {
		if err := lim.checkCount(yamlItems(v)); err != nil {
			return nil, err
		}
		var err error
		if j, err = yaml.YAMLToJSON(j); err != nil {
			return nil, bad(err)
		}
	}
	// Case-sensitive and strict, as Kubernetes decodes objects: "hostport"
	// is an unknown field, not hostPort.
	strict, err := k8sjson.UnmarshalStrict(j, &entries, k8sjson.DisallowDuplicateFields, k8sjson.DisallowUnknownFields)
	if err == nil && len(strict) > 0 {
		err = errors.Join(strict...)
	}
	if err != nil {
		return nil, bad(err)
	}
	if err := lim.checkCount(len(entries)); err != nil {
		return nil, err
	}
	out := make([]hcn.PortMapping, 0, len(entries))
	for i, e := range entries {
		m, reason := e.mapping()
		if reason != "" {
			return nil, &MappingError{Entry: fmt.Sprintf("#%d (%s)", i+1, e), Reason: reason}
		}
		out = append(out, m)
	}
	return out, nil
}

// yamlItems counts the lines that start a top-level YAML block sequence
// entry: an upper bound of the entries a YAML value can hold.
func yamlItems(v string) int {
	n := 0
	for line := range strings.Lines(v) {
		if strings.HasPrefix(line, "-") && !strings.HasPrefix(line, "---") {
			n++
		}
	}
	return n
}

func (e listEntry) String() string {
	f := func(p *int) string {
		if p == nil {
			return "-"
		}
		return strconv.Itoa(*p)
	}
	return fmt.Sprintf("containerPort=%s hostPort=%s protocol=%q hostIP=%q", f(e.ContainerPort), f(e.HostPort), e.Protocol, e.HostIP)
}

func (e listEntry) mapping() (hcn.PortMapping, string) {
	m := hcn.PortMapping{Protocol: hcn.TCP}
	if e.ContainerPort == nil {
		return m, "containerPort is missing"
	}
	if e.HostPort == nil {
		return m, "hostPort is missing"
	}
	var reason string
	if m.ContainerPort, reason = checkPort("containerPort", *e.ContainerPort); reason != "" {
		return m, reason
	}
	if m.HostPort, reason = checkPort("hostPort", *e.HostPort); reason != "" {
		return m, reason
	}
	if e.Protocol != "" {
		if m.Protocol, reason = parseProtocol(e.Protocol); reason != "" {
			return m, reason
		}
	}
	if e.HostIP != "" {
		if m.HostIP, reason = parseHostIP(e.HostIP); reason != "" {
			return m, reason
		}
	}
	return m, ""
}

// Overlap reports whether two mappings claim the same host port: same
// protocol and host port, and host IPs that can coincide (no host IP, or an
// unspecified one of the same family, overlaps every address).
func Overlap(a, b hcn.PortMapping) bool {
	if a.Protocol != b.Protocol || a.HostPort != b.HostPort {
		return false
	}
	if !a.HostIP.IsValid() || !b.HostIP.IsValid() {
		return true
	}
	if a.HostIP.Is4() != b.HostIP.Is4() {
		return false
	}
	return a.HostIP.IsUnspecified() || b.HostIP.IsUnspecified() || a.HostIP == b.HostIP
}

// overlapIndex finds, for a mapping, the first earlier mapping it duplicates
// or overlaps, in constant time: mappings can only collide when protocol and
// host port agree, and within such a group only with an entry without host
// IP, an unspecified address of the same family, or the same address.
type overlapIndex struct {
	groups map[overlapGroup]*overlapEntries
}

type overlapGroup struct {
	proto hcn.Protocol
	port  uint16
}

// overlapEntries holds the index of the first entry of each kind (-1: none).
type overlapEntries struct {
	noIP, any4, any6, unspec4, unspec6 int
	byAddr                             map[netip.Addr]int
}

func newOverlapIndex(n int) *overlapIndex {
	return &overlapIndex{groups: make(map[overlapGroup]*overlapEntries, n)}
}

// first returns the index of the earliest recorded mapping that m overlaps
// (or duplicates), or -1.
func (x *overlapIndex) first(m hcn.PortMapping) int {
	g := x.groups[overlapGroup{m.Protocol, m.HostPort}]
	if g == nil {
		return -1
	}
	best := -1
	pick := func(i int) {
		if i >= 0 && (best < 0 || i < best) {
			best = i
		}
	}
	switch {
	case !m.HostIP.IsValid():
		pick(g.noIP)
		pick(g.any4)
		pick(g.any6)
	case m.HostIP.IsUnspecified():
		pick(g.noIP)
		if m.HostIP.Is4() {
			pick(g.any4)
		} else {
			pick(g.any6)
		}
	default:
		pick(g.noIP)
		if m.HostIP.Is4() {
			pick(g.unspec4)
		} else {
			pick(g.unspec6)
		}
		if i, ok := g.byAddr[m.HostIP]; ok {
			pick(i)
		}
	}
	return best
}

// add records m as entry i (entries are added in order).
func (x *overlapIndex) add(i int, m hcn.PortMapping) {
	k := overlapGroup{m.Protocol, m.HostPort}
	g := x.groups[k]
	if g == nil {
		g = &overlapEntries{noIP: -1, any4: -1, any6: -1, unspec4: -1, unspec6: -1}
		x.groups[k] = g
	}
	set := func(p *int) {
		if *p < 0 {
			*p = i
		}
	}
	switch {
	case !m.HostIP.IsValid():
		set(&g.noIP)
		return
	case m.HostIP.Is4():
		set(&g.any4)
		if m.HostIP.IsUnspecified() {
			set(&g.unspec4)
		}
	default:
		set(&g.any6)
		if m.HostIP.IsUnspecified() {
			set(&g.unspec6)
		}
	}
	if g.byAddr == nil {
		g.byAddr = map[netip.Addr]int{}
	}
	if _, ok := g.byAddr[m.HostIP]; !ok {
		g.byAddr[m.HostIP] = i
	}
}

// CheckOverlaps rejects duplicates and overlapping host ports within one
// pod's mappings, in linear time. name describes each mapping in errors
// (nil: its String). The first offending entry is reported, against the
// earliest entry it collides with.
func CheckOverlaps(ms []hcn.PortMapping, name func(i int) string) error {
	if name == nil {
		name = func(i int) string { return strconv.Quote(ms[i].String()) }
	}
	idx := newOverlapIndex(len(ms))
	for i := range ms {
		if j := idx.first(ms[i]); j >= 0 {
			if ms[i] == ms[j] {
				return &MappingError{Entry: name(i), Reason: "duplicates entry " + name(j)}
			}
			return &MappingError{Entry: name(i), Reason: "host port " + strconv.Itoa(int(ms[i].HostPort)) + "/" +
				ms[i].Protocol.String() + " overlaps entry " + name(j)}
		}
		idx.add(i, ms[i])
	}
	return nil
}
