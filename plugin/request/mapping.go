package request

import (
	"fmt"
	"net/netip"

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
