package hcn

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// Reading back what HNS holds. hcsshim decodes a PortMapping policy's
// settings into numbers (Protocol uint32, Flags NatFlags); HNS's own
// schema writes enums "as string" (learn.microsoft.com, the HCN JSON
// schema), and clients send the protocol as a name too (Azure CNI issue
// 1863's sample). How a given HNS build reads a policy back is not known,
// so a read-back is decoded leniently: numbers, numeric strings and names,
// and a setting that still does not decode is kept as Undecoded (never
// dropped silently).

// DecodePortMapping reads a PortMapping policy's settings: protocol as a
// number (6, 17) or a name ("TCP", "udp"), ports as numbers or numeric
// strings, flags as a number or names ("LocalRoutedVip", "IPv6", joined
// by "," or "|").
func DecodePortMapping(raw json.RawMessage) (PortMappingPolicy, error) {
	var s struct {
		Protocol, InternalPort, ExternalPort, Flags json.RawMessage
		VIP                                         string
	}
	if err := json.Unmarshal(raw, &s); err != nil {
		return PortMappingPolicy{}, fmt.Errorf("PortMapping settings %s: %w", raw, err)
	}
	p := PortMappingPolicy{VIP: s.VIP}
	var err error
	if p.Protocol, err = protocolOf(s.Protocol); err != nil {
		return p, fmt.Errorf("PortMapping settings %s: %w", raw, err)
	}
	for _, f := range []struct {
		raw json.RawMessage
		to  *uint16
		key string
	}{{s.InternalPort, &p.InternalPort, "InternalPort"}, {s.ExternalPort, &p.ExternalPort, "ExternalPort"}} {
		n, err := numberOf(f.raw, 16)
		if err != nil {
			return p, fmt.Errorf("PortMapping settings %s: %s: %w", raw, f.key, err)
		}
		*f.to = uint16(n)
	}
	if p.Flags, err = flagsOf(s.Flags); err != nil {
		return p, fmt.Errorf("PortMapping settings %s: %w", raw, err)
	}
	return p, nil
}

// DecodeV1NAT reads a v1 NAT policy's settings, as HNS may show one
// through the v2 API (its own kind "NAT": protocol a name, as
// Windows-Containers 360 quotes one); ok is false when it maps no host
// port.
func DecodeV1NAT(raw json.RawMessage) (PortMappingPolicy, bool) {
	var s struct {
		Protocol, InternalPort, ExternalPort json.RawMessage
		VIP                                  string
	}
	if json.Unmarshal(raw, &s) != nil {
		return PortMappingPolicy{}, false
	}
	in, ierr := numberOf(s.InternalPort, 16)
	ext, eerr := numberOf(s.ExternalPort, 16)
	if ierr != nil || eerr != nil || ext == 0 {
		return PortMappingPolicy{}, false
	}
	p := PortMappingPolicy{InternalPort: uint16(in), ExternalPort: uint16(ext), VIP: s.VIP, Protocol: TCP}
	if proto, err := protocolOf(s.Protocol); err == nil && proto != 0 {
		p.Protocol = proto
	}
	return p, true
}

func isNull(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	return len(t) == 0 || string(t) == "null"
}

// numberOf is a JSON number or numeric string of at most bits bits;
// absent is 0.
func numberOf(raw json.RawMessage, bits int) (uint64, error) {
	if isNull(raw) {
		return 0, nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return strconv.ParseUint(strings.TrimSpace(s), 10, bits)
	}
	var n uint64
	if err := json.Unmarshal(raw, &n); err != nil {
		return 0, fmt.Errorf("%s is no number", raw)
	}
	if bits < 64 && n >= 1<<bits {
		return 0, fmt.Errorf("%d is out of range", n)
	}
	return n, nil
}

func protocolOf(raw json.RawMessage) (Protocol, error) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		switch strings.ToUpper(strings.TrimSpace(s)) {
		case "TCP":
			return TCP, nil
		case "UDP":
			return UDP, nil
		}
	}
	n, err := numberOf(raw, 32)
	if err != nil {
		return 0, fmt.Errorf("Protocol %s: %w", raw, err)
	}
	return Protocol(n), nil
}

func flagsOf(raw json.RawMessage) (NatFlags, error) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		if n, err := strconv.ParseUint(strings.TrimSpace(s), 10, 32); err == nil {
			return NatFlags(n), nil
		}
		var f NatFlags
		for _, name := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == '|' || r == ' ' }) {
			switch strings.ToLower(name) {
			case "none":
			case "localroutedvip":
				f |= NatFlagsLocalRoutedVip
			case "ipv6":
				f |= NatFlagsIPv6
			default:
				return 0, fmt.Errorf("Flags %q: %q is no NAT flag", s, name)
			}
		}
		return f, nil
	}
	n, err := numberOf(raw, 32)
	if err != nil {
		return 0, fmt.Errorf("Flags %s: %w", raw, err)
	}
	return NatFlags(n), nil
}
