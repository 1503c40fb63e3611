package request

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
)

// PortMapping is one host-port -> container-port mapping requested for a pod.
// A zero HostIP means "every host address".
type PortMapping struct {
	Protocol      hcn.Protocol
	ContainerPort uint16
	HostPort      uint16
	HostIP        netip.Addr
}

func (m PortMapping) String() string {
	host := ""
	if m.HostIP.IsValid() {
		host = m.HostIP.String()
		if m.HostIP.Is6() {
			host = "[" + host + "]"
		}
		host += ":"
	}
	return fmt.Sprintf("%s%d:%d/%s", host, m.HostPort, m.ContainerPort, m.Protocol)
}

// PolicyOptions control how port mappings become HNS policies.
type PolicyOptions struct {
	// LocalRoutedVIP sets NatFlagsLocalRoutedVip so the mapped port is also
	// reachable from the node itself.
	LocalRoutedVIP bool
	// DualStack: a mapping without host IP gets an IPv4 and an IPv6 policy.
	DualStack bool
}

// BuildPolicies turns port mappings into HNS v2 PortMapping policies, applying
// the dual-stack rule: a host IPv4 gives one IPv4 policy, a host IPv6 one
// policy with the IPv6 flag, no host IP one IPv4 policy plus, with DualStack,
// one IPv6 policy. An unspecified host IP (0.0.0.0, ::) means every address
// of its family: no VIP. The result is sorted so equal inputs compare equal.
func BuildPolicies(mappings []PortMapping, o PolicyOptions) []hcn.PortMappingPolicy {
	var base hcn.NatFlags
	if o.LocalRoutedVIP {
		base |= hcn.NatFlagsLocalRoutedVip
	}
	out := make([]hcn.PortMappingPolicy, 0, len(mappings))
	for _, m := range mappings {
		p := hcn.PortMappingPolicy{Protocol: m.Protocol, InternalPort: m.ContainerPort, ExternalPort: m.HostPort, Flags: base}
		ip := m.HostIP.Unmap()
		switch {
		case ip.IsValid() && ip.Is4():
			if !ip.IsUnspecified() { // 0.0.0.0: every IPv4 address, no VIP
				p.VIP = ip.String()
			}
			out = append(out, p)
		case ip.IsValid():
			if !ip.IsUnspecified() { // ::: every IPv6 address, no VIP
				p.VIP = ip.String()
			}
			p.Flags |= hcn.NatFlagsIPv6
			out = append(out, p)
		default:
			out = append(out, p)
			if o.DualStack {
				p.Flags |= hcn.NatFlagsIPv6
				out = append(out, p)
			}
		}
	}
	hcn.SortPolicies(out)
	return out
}

// MergeMappings combines annotation and CRI mappings: the same mapping from
// both counts once; a CRI mapping that claims a host port an annotation
// entry also claims, differently, is an error naming both. The merged list
// is held to lim. Linear in the number of mappings.
func MergeMappings(ann, cri []PortMapping, lim Limits) ([]PortMapping, error) {
	out := append(make([]PortMapping, 0, len(ann)+len(cri)), ann...)
	idx := newOverlapIndex(len(ann) + len(cri))
	for i, a := range out {
		idx.add(i, a)
	}
	for _, c := range cri {
		if j := idx.first(c); j >= 0 {
			if out[j] == c {
				continue // given by both sources: once
			}
			return nil, &MappingError{Entry: fmt.Sprintf("CRI hostPort %q", c.String()),
				Reason: fmt.Sprintf("conflicts with %q (annotation %s and Kubernetes hostPort disagree)", out[j].String(), AnnotationPortMappings)}
		}
		idx.add(len(out), c)
		out = append(out, c)
	}
	if err := lim.checkPorts(len(out)); err != nil {
		return nil, fmt.Errorf("annotation and CRI hostPorts together: %w", err)
	}
	return out, nil
}

// Limits bound what one pod can ask for, so that no annotation a pod author
// writes can hold up the runtime's node-wide NRI lock or ask HNS for an
// endpoint with thousands of policies. Zero means no limit.
type Limits struct {
	MaxMappings int // host-port mappings per pod, every source counted, a range counting its ports (plugin.max_mappings_per_pod)
	MaxBytes    int // bytes of the annotation value (plugin.max_annotation_bytes)
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

// checkCount rejects n entries over the limit, before they are parsed
// (each entry maps a port at least).
func (l Limits) checkCount(n int) error {
	if l.MaxMappings > 0 && n > l.MaxMappings {
		return &LimitError{What: "entries", Count: n, Limit: l.MaxMappings, Key: KeyMaxMappings}
	}
	return nil
}

// checkPorts rejects n host-port mappings over the limit (a range counts
// its ports).
func (l Limits) checkPorts(n int) error {
	if l.MaxMappings > 0 && n > l.MaxMappings {
		return &LimitError{What: "host ports (a range counts its ports)", Count: n, Limit: l.MaxMappings, Key: KeyMaxMappings}
	}
	return nil
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
func (x *overlapIndex) first(m PortMapping) int {
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
func (x *overlapIndex) add(i int, m PortMapping) {
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
func CheckOverlaps(ms []PortMapping, name func(i int) string) error {
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

// Unheld returns the mappings of ms (and of annotated, a part of them) that
// the host ports in place (held) do not map yet: a mapping is held when
// every policy it is built into (with o) is there, whatever the flags
// other than the address family. What is held was admitted when it was
// built; what is not is admitted as a new pod's would be.
func Unheld(ms, annotated []PortMapping, o PolicyOptions, held []hcn.PortMappingPolicy) (newMs, newAnnotated []PortMapping) {
	keys := hcn.Keys(held)
	isHeld := func(m PortMapping) bool {
		for _, p := range BuildPolicies([]PortMapping{m}, o) {
			if !keys[p.Key()] {
				return false
			}
		}
		return true
	}
	for _, m := range ms {
		if !isHeld(m) {
			newMs = append(newMs, m)
		}
	}
	for _, m := range annotated {
		if !isHeld(m) {
			newAnnotated = append(newAnnotated, m)
		}
	}
	return newMs, newAnnotated
}
