package request

import (
	"net/netip"
	"strconv"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
)

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
