package request

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strconv"
	"strings"

	yamlv3 "go.yaml.in/yaml/v3"
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

// ParsePortMappings parses the value of AnnotationPortMappings. Two forms:
//
//	compact, comma-separated: 8080:80, 8080:80/udp, 10.0.0.4:8443:443/tcp, [fd00::4]:8080:80
//	a JSON or YAML list: [{"containerPort":80,"hostPort":8080,"protocol":"TCP","hostIP":"10.0.0.4"}]
//
// An empty value yields no mappings. Duplicate or overlapping mappings are
// rejected. The limits are checked before any per-entry work (the size
// first, then the number of entries); the cost is linear in the value.
func ParsePortMappings(value string, lim Limits) ([]PortMapping, error) {
	if lim.MaxBytes > 0 && len(value) > lim.MaxBytes {
		return nil, &LimitError{What: "bytes", Count: len(value), Limit: lim.MaxBytes, Key: KeyMaxBytes}
	}
	if err := lineBreaks(value); err != nil {
		return nil, err
	}
	v := strings.Trim(value, blanks)
	if v == "" {
		return nil, nil
	}
	var (
		out  []PortMapping
		from []string // the entry each mapping comes from, as errors name it
		err  error
	)
	if isListForm(v) {
		out, from, err = parseList(v, lim)
	} else {
		out, from, err = parseCompact(v, lim)
	}
	if err != nil {
		return nil, err
	}
	if err := CheckOverlaps(out, func(i int) string { return from[i] }); err != nil {
		return nil, err
	}
	return out, nil
}

// blanks are what the grammar ignores around the value and its compact
// entries: space, tab, and the line breaks LF and CRLF. Unicode's other
// spaces are not blanks (a policy engine may not trim them).
const blanks = " \t\r\n"

// lineBreaks refuses a value with a line break but LF and CRLF: YAML 1.1
// readers (and go-yaml) take NEL, LS and PS as line breaks where YAML 1.2
// readers do not, and a lone CR is one only to some.
func lineBreaks(v string) error {
	for i, r := range v {
		switch {
		case r == '\r' && !strings.HasPrefix(v[i:], "\r\n"):
			return &MappingError{Entry: "value", Reason: fmt.Sprintf("a carriage return without a line feed at byte %d: line breaks are LF or CRLF", i)}
		case r == '\u0085' || r == '\u2028' || r == '\u2029':
			return &MappingError{Entry: "value", Reason: fmt.Sprintf("%U at byte %d: line breaks are LF or CRLF", r, i)}
		}
	}
	return nil
}

// isListForm tells a JSON/YAML list from a compact entry that starts with a
// bracketed IPv6 address.
func isListForm(v string) bool {
	if v == "-" || strings.HasPrefix(v, "- ") || strings.HasPrefix(v, "-\n") {
		return true // a YAML block list
	}
	if rest, ok := strings.CutPrefix(v, "["); ok {
		rest = strings.TrimLeft(rest, blanks)
		return rest == "" || rest[0] == '{' || rest[0] == ']'
	}
	return false
}

func parseCompact(v string, lim Limits) ([]PortMapping, []string, error) {
	if err := lim.checkCount(strings.Count(v, ",") + 1); err != nil {
		return nil, nil, err
	}
	out := make([]PortMapping, 0, strings.Count(v, ",")+1)
	var from []string
	for _, raw := range strings.Split(v, ",") {
		entry := strings.Trim(raw, blanks)
		r, reason := parseCompactEntry(entry)
		if reason != "" {
			return nil, nil, &MappingError{Entry: strconv.Quote(entry), Reason: reason}
		}
		if err := lim.checkPorts(len(out) + r.width()); err != nil {
			return nil, nil, fmt.Errorf("entry %s: %w", strconv.Quote(entry), err)
		}
		out, from = r.expand(out, from, strconv.Quote(entry))
	}
	return out, from, nil
}

// portRange is one entry of the annotation: a mapping, or a range of n
// of them (host ports HostPort.. onto container ports ContainerPort..,
// port by port).
type portRange struct {
	PortMapping
	n int // 0 or 1: one mapping
}

func (r portRange) width() int { return max(r.n, 1) }

// span makes r a range up to host port he and container port ce (hr, cr:
// whether each side was written as a range, hs and cs as written), or
// says why it cannot be one: a range is on both sides, of one width.
func (r *portRange) span(he, ce uint16, hr, cr bool, hs, cs string) string {
	hw, cw := int(he)-int(r.HostPort)+1, int(ce)-int(r.ContainerPort)+1
	switch {
	case hr != cr:
		return fmt.Sprintf("a range on one side only (%s:%s): both sides are ranges of one width, as 10000-10999:10000-10999", hs, cs)
	case hw != cw:
		return fmt.Sprintf("host ports %s (%d) and container ports %s (%d) differ in width: a range maps port by port", hs, hw, cs, cw)
	}
	r.n = hw
	return ""
}

// expand appends r's mappings to out, and name for each to from.
func (r portRange) expand(out []PortMapping, from []string, name string) ([]PortMapping, []string) {
	for i := range r.width() {
		m := r.PortMapping
		m.HostPort += uint16(i)
		m.ContainerPort += uint16(i)
		out, from = append(out, m), append(from, name)
	}
	return out, from
}

func parseCompactEntry(entry string) (portRange, string) {
	var m portRange
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
	hostIP, ports, reason := splitHostIP(body)
	if reason != "" {
		return m, reason
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
	return m, m.ports(ports)
}

// splitHostIP splits a compact entry (its protocol cut off) into its host
// IP as written ("" when it has none) and its ports; an IPv6 host IP is
// in brackets.
func splitHostIP(body string) (hostIP, ports, reason string) {
	if !strings.HasPrefix(body, "[") {
		parts := strings.Split(body, ":")
		switch len(parts) {
		case 2:
			return "", body, ""
		case 3:
			return parts[0], parts[1] + ":" + parts[2], ""
		}
		return "", "", "want [hostIP:]hostPort:containerPort[/protocol] (IPv6 host IPs go in brackets)"
	}
	end := strings.Index(body, "]")
	if end < 0 {
		return "", "", "unclosed '[' around the host IP"
	}
	hostIP = body[1:end]
	ports, ok := strings.CutPrefix(body[end+1:], ":")
	switch {
	case !ok:
		return "", "", "expected ':' after the bracketed host IP"
	case hostIP == "":
		return "", "", "empty host IP in brackets"
	case !strings.Contains(hostIP, ":"):
		return "", "", fmt.Sprintf("host IP [%s] is no IPv6 address: only IPv6 host IPs go in brackets", hostIP)
	}
	return hostIP, ports, ""
}

// ports reads a compact entry's hostPort:containerPort, each a port or a
// range, into r.
func (r *portRange) ports(ports string) string {
	hp, cp, ok := strings.Cut(ports, ":")
	if !ok || strings.Contains(cp, ":") {
		return "want hostPort:containerPort"
	}
	hs, he, hr, reason := parsePortRange("host port", hp)
	if reason != "" {
		return reason
	}
	cs, ce, cr, reason := parsePortRange("container port", cp)
	if reason != "" {
		return reason
	}
	r.HostPort, r.ContainerPort = hs, cs
	return r.span(he, ce, hr, cr, hp, cp)
}

// parsePortRange reads a compact form port or range of ports (first-last,
// first no greater than last).
func parsePortRange(what, s string) (first, last uint16, isRange bool, reason string) {
	a, b, isRange := strings.Cut(s, "-")
	if isRange && (a == "" || b == "") { // -1, 80-: no range, and no number
		_, reason = parsePort(what, s)
		return 0, 0, false, reason
	}
	if first, reason = parsePort(what, a); reason != "" || !isRange {
		return first, first, false, reason
	}
	if last, reason = parsePort(what, b); reason != "" {
		return 0, 0, true, reason
	}
	if last < first {
		return 0, 0, true, fmt.Sprintf("%s range %s is reversed: write %d-%d", what, s, last, first)
	}
	return first, last, true, ""
}

// parsePort reads a compact form port: a plain decimal number, without a
// sign, a leading zero or blanks (one reading: 03389 is not 3389 to every
// reader).
func parsePort(what, s string) (uint16, string) {
	n, err := strconv.Atoi(s)
	if err != nil || !plainDecimal(s) {
		return 0, fmt.Sprintf("%s %q is not a plain decimal number", what, s)
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
	switch strings.ToLower(s) {
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

// parseHostIP reads a host IP as written: no blanks, and an IPv4-mapped
// IPv6 address is refused rather than read as IPv4 (a reader of the
// annotation would take it for IPv6).
func parseHostIP(s string) (netip.Addr, string) {
	ip, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}, fmt.Sprintf("host IP %q is not an IP address", s)
	}
	if ip.Is4In6() {
		return netip.Addr{}, fmt.Sprintf("host IP %q is an IPv4-mapped IPv6 address: write the IPv4 address %s", s, ip.Unmap())
	}
	if ip.Zone() != "" {
		return netip.Addr{}, fmt.Sprintf("host IP %q: zones are not supported", s)
	}
	if ip.IsMulticast() {
		return netip.Addr{}, fmt.Sprintf("host IP %q is a multicast address", s)
	}
	return ip, ""
}

// listEntry is one element of the list form. Pointers tell missing from zero.
type listEntry struct {
	ContainerPort    *int   `json:"containerPort"`
	HostPort         *int   `json:"hostPort"`
	ContainerPortEnd *int   `json:"containerPortEnd"` // a range: its last container port
	HostPortEnd      *int   `json:"hostPortEnd"`      // a range: its last host port
	Protocol         string `json:"protocol"`
	HostIP           string `json:"hostIP"`
}

func parseList(v string, lim Limits) ([]PortMapping, []string, error) {
	entries, err := decodeList(v, lim)
	if err != nil {
		return nil, nil, err
	}
	out := make([]PortMapping, 0, len(entries))
	var from []string
	for i, e := range entries {
		name := fmt.Sprintf("#%d (%s)", i+1, e)
		r, reason := e.mapping()
		if reason != "" {
			return nil, nil, &MappingError{Entry: name, Reason: reason}
		}
		if err := lim.checkPorts(len(out) + r.width()); err != nil {
			return nil, nil, fmt.Errorf("entry %s: %w", name, err)
		}
		out, from = r.expand(out, from, name)
	}
	return out, from, nil
}

// decodeList decodes the list form's entries, no more of them than lim
// allows.
func decodeList(v string, lim Limits) ([]listEntry, error) {
	bad := func(err error) error {
		return &MappingError{Entry: "list", Reason: "not a valid JSON/YAML list of {containerPort, hostPort, containerPortEnd, hostPortEnd, protocol, hostIP}: " + err.Error()}
	}
	// JSON, the common form, is decoded directly; YAML goes through the
	// (much slower) YAML-to-JSON conversion only after its top-level entries
	// ("-" at the start of a line) are counted against the limit.
	j := []byte(v)
	if !strings.HasPrefix(v, "[") || !json.Valid(j) {
		if err := lim.checkCount(yamlItems(v)); err != nil {
			return nil, err
		}
		if err := strictYAML(v); err != nil {
			return nil, bad(err)
		}
		var err error
		if j, err = yaml.YAMLToJSON(j); err != nil {
			return nil, bad(err)
		}
	}
	// Case-sensitive and strict, as Kubernetes decodes objects: "hostport"
	// is an unknown field, not hostPort.
	var entries []listEntry
	strict, err := k8sjson.UnmarshalStrict(j, &entries, k8sjson.DisallowDuplicateFields, k8sjson.DisallowUnknownFields)
	if err == nil && len(strict) > 0 {
		err = errors.Join(strict...)
	}
	if err != nil {
		return nil, bad(err)
	}
	return entries, lim.checkCount(len(entries))
}

// strictYAML holds the YAML list form to one reading, the one JSON's
// strict decoding and the compact form give, so that a policy engine
// reading the annotation sees the ports the plugin maps. It names what is
// taken and refuses everything else YAML can say: one document, holding
// a list; each entry a mapping of the four keys (containerPort, hostPort,
// protocol, hostIP), each at most once, to a scalar; ports written as
// plain decimal numbers. Tags (!!int 0x1f90 is 8080), anchors, aliases,
// merge keys (<<), YAML 1.1's other integers (0x1f90, 0o17702, 080, 8_080,
// +8080) and nested values are refused.
func strictYAML(v string) error {
	dec := yamlv3.NewDecoder(strings.NewReader(v))
	var doc, next yamlv3.Node
	if err := dec.Decode(&doc); err != nil {
		return err
	}
	if err := dec.Decode(&next); !errors.Is(err, io.EOF) {
		return errors.New("the value holds more than one YAML document; the list form is one")
	}
	if err := plainNode(&doc); err != nil {
		return err
	}
	if len(doc.Content) != 1 || doc.Content[0].Kind != yamlv3.SequenceNode {
		return errors.New("the list form is a list of entries")
	}
	list := doc.Content[0]
	if err := plainNode(list); err != nil {
		return err
	}
	for _, entry := range list.Content {
		if err := strictEntry(entry); err != nil {
			return err
		}
	}
	return nil
}

// strictEntry holds one entry of the YAML list form to strictYAML's
// reading: a mapping of the list form's keys, each at most once, to a
// plain scalar, its ports plain decimal numbers.
func strictEntry(entry *yamlv3.Node) error {
	if err := plainNode(entry); err != nil {
		return err
	}
	if entry.Kind != yamlv3.MappingNode {
		return fmt.Errorf("line %d: an entry is a mapping of containerPort, hostPort, protocol and hostIP", entry.Line)
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(entry.Content); i += 2 {
		k, val := entry.Content[i], entry.Content[i+1]
		if err := plainNode(k); err != nil {
			return err
		}
		if err := plainNode(val); err != nil {
			return err
		}
		switch {
		case k.Kind != yamlv3.ScalarNode || k.Style != 0 || !listKey(k.Value):
			return fmt.Errorf("line %d: key %q is not one of containerPort, hostPort, containerPortEnd, hostPortEnd, protocol, hostIP", k.Line, k.Value)
		case seen[k.Value]:
			return fmt.Errorf("line %d: key %q appears twice in one entry", k.Line, k.Value)
		case val.Kind != yamlv3.ScalarNode:
			return fmt.Errorf("line %d: %s takes a single value", val.Line, k.Value)
		case (strings.HasSuffix(k.Value, "Port") || strings.HasSuffix(k.Value, "PortEnd")) && (val.Style != 0 || !plainDecimal(val.Value)):
			return fmt.Errorf("line %d: %s %q is not a plain decimal number", val.Line, k.Value, val.Value)
		}
		seen[k.Value] = true
	}
	return nil
}

// listKey reports whether k is a key of a list form entry.
func listKey(k string) bool {
	switch k {
	case "containerPort", "hostPort", "containerPortEnd", "hostPortEnd", "protocol", "hostIP":
		return true
	}
	return false
}

// plainNode refuses what gives a YAML node another reading than its text:
// an explicit tag, an anchor, an alias.
func plainNode(n *yamlv3.Node) error {
	switch {
	case n.Kind == yamlv3.AliasNode:
		return fmt.Errorf("line %d: YAML aliases are not taken", n.Line)
	case n.Anchor != "":
		return fmt.Errorf("line %d: YAML anchors (&%s) are not taken", n.Line, n.Anchor)
	case n.Style&yamlv3.TaggedStyle != 0:
		return fmt.Errorf("line %d: YAML tags (%s) are not taken", n.Line, n.Tag)
	}
	return nil
}

// plainDecimal: digits only, without a leading zero (a lone 0 aside).
func plainDecimal(s string) bool {
	if s == "" || (len(s) > 1 && s[0] == '0') {
		return false
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
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
	s := fmt.Sprintf("containerPort=%s hostPort=%s", f(e.ContainerPort), f(e.HostPort))
	if e.ContainerPortEnd != nil || e.HostPortEnd != nil {
		s += fmt.Sprintf(" containerPortEnd=%s hostPortEnd=%s", f(e.ContainerPortEnd), f(e.HostPortEnd))
	}
	return s + fmt.Sprintf(" protocol=%q hostIP=%q", e.Protocol, e.HostIP)
}

func (e listEntry) mapping() (portRange, string) {
	m := portRange{PortMapping: PortMapping{Protocol: hcn.TCP}}
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
	he, reason := rangeEnd("hostPortEnd", "hostPort", e.HostPortEnd, m.HostPort)
	if reason != "" {
		return m, reason
	}
	ce, reason := rangeEnd("containerPortEnd", "containerPort", e.ContainerPortEnd, m.ContainerPort)
	if reason != "" {
		return m, reason
	}
	return m, m.span(he, ce, e.HostPortEnd != nil, e.ContainerPortEnd != nil,
		fmt.Sprintf("%d-%d", m.HostPort, he), fmt.Sprintf("%d-%d", m.ContainerPort, ce))
}

// rangeEnd is a list entry's last port of a range, p (first where p is
// nil: no range), which runs up from first.
func rangeEnd(name, of string, p *int, first uint16) (uint16, string) {
	if p == nil {
		return first, ""
	}
	end, reason := checkPort(name, *p)
	if reason == "" && end < first {
		reason = fmt.Sprintf("%s %d is below %s %d: a range runs up", name, end, of, first)
	}
	return end, reason
}
