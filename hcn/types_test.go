package hcn

import (
	"net/netip"
	"testing"
)

func TestBuildPolicies(t *testing.T) {
	v4 := netip.MustParseAddr("10.0.0.4")
	v6 := netip.MustParseAddr("fd00::4")
	tests := []struct {
		name string
		in   []PortMapping
		opt  PolicyOptions
		want []PortMappingPolicy
	}{
		{"tcp no host ip, local routed", []PortMapping{{Protocol: TCP, HostPort: 8080, ContainerPort: 80}},
			PolicyOptions{LocalRoutedVIP: true},
			[]PortMappingPolicy{{Protocol: 6, ExternalPort: 8080, InternalPort: 80, Flags: 1}}},
		{"udp protocol number, no flags", []PortMapping{{Protocol: UDP, HostPort: 53, ContainerPort: 5353}},
			PolicyOptions{},
			[]PortMappingPolicy{{Protocol: 17, ExternalPort: 53, InternalPort: 5353}}},
		{"ipv4 host ip is the VIP", []PortMapping{{Protocol: TCP, HostPort: 8443, ContainerPort: 443, HostIP: v4}},
			PolicyOptions{LocalRoutedVIP: true, DualStack: true},
			[]PortMappingPolicy{{Protocol: 6, ExternalPort: 8443, InternalPort: 443, VIP: "10.0.0.4", Flags: 1}}},
		{"ipv6 host ip sets the IPv6 flag", []PortMapping{{Protocol: TCP, HostPort: 8080, ContainerPort: 80, HostIP: v6}},
			PolicyOptions{LocalRoutedVIP: true},
			[]PortMappingPolicy{{Protocol: 6, ExternalPort: 8080, InternalPort: 80, VIP: "fd00::4", Flags: 3}}},
		{"ipv6 host ip without local routing", []PortMapping{{Protocol: UDP, HostPort: 8080, ContainerPort: 80, HostIP: v6}},
			PolicyOptions{},
			[]PortMappingPolicy{{Protocol: 17, ExternalPort: 8080, InternalPort: 80, VIP: "fd00::4", Flags: 2}}},
		{"dual stack without host ip gives both", []PortMapping{{Protocol: TCP, HostPort: 8080, ContainerPort: 80}},
			PolicyOptions{LocalRoutedVIP: true, DualStack: true},
			[]PortMappingPolicy{{Protocol: 6, ExternalPort: 8080, InternalPort: 80, Flags: 1}, {Protocol: 6, ExternalPort: 8080, InternalPort: 80, Flags: 3}}},
		{"unspecified v4 is v4 only, no VIP", []PortMapping{{Protocol: TCP, HostPort: 80, ContainerPort: 80, HostIP: netip.IPv4Unspecified()}},
			PolicyOptions{DualStack: true},
			[]PortMappingPolicy{{Protocol: 6, ExternalPort: 80, InternalPort: 80}}},
		{"unspecified v6 is v6 only, no VIP", []PortMapping{{Protocol: TCP, HostPort: 80, ContainerPort: 80, HostIP: netip.IPv6Unspecified()}},
			PolicyOptions{DualStack: true},
			[]PortMappingPolicy{{Protocol: 6, ExternalPort: 80, InternalPort: 80, Flags: 2}}},
		{"sorted canonically", []PortMapping{{Protocol: UDP, HostPort: 1, ContainerPort: 1}, {Protocol: TCP, HostPort: 9, ContainerPort: 9}, {Protocol: TCP, HostPort: 2, ContainerPort: 2}},
			PolicyOptions{},
			[]PortMappingPolicy{{Protocol: 6, ExternalPort: 2, InternalPort: 2}, {Protocol: 6, ExternalPort: 9, InternalPort: 9}, {Protocol: 17, ExternalPort: 1, InternalPort: 1}}},
		{"none", nil, PolicyOptions{}, []PortMappingPolicy{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := BuildPolicies(tt.in, tt.opt)
			if len(got) != len(tt.want) {
				t.Fatalf("BuildPolicies = %v, want %v", got, tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Errorf("policy %d = %+v, want %+v", i, got[i], tt.want[i])
				}
			}
		})
	}
}

func TestSamePoliciesIgnoresOrder(t *testing.T) {
	a := []PortMappingPolicy{{Protocol: TCP, ExternalPort: 1, InternalPort: 1}, {Protocol: UDP, ExternalPort: 2, InternalPort: 2}}
	b := []PortMappingPolicy{a[1], a[0]}
	if !SamePolicies(a, b) {
		t.Error("same policies in another order should compare equal")
	}
	c := []PortMappingPolicy{a[0], {Protocol: UDP, ExternalPort: 2, InternalPort: 3}}
	if SamePolicies(a, c) || SamePolicies(a, a[:1]) {
		t.Error("different policies compare equal")
	}
}

func TestProvidedBy(t *testing.T) {
	cni := []Endpoint{
		{ID: "a", PortMappings: []PortMappingPolicy{{Protocol: UDP, ExternalPort: 53, InternalPort: 53}}},
		{ID: "b", PortMappings: []PortMappingPolicy{
			{Protocol: TCP, ExternalPort: 8080, InternalPort: 80},
			{Protocol: TCP, ExternalPort: 8443, InternalPort: 443, VIP: "10.0.0.4"},
			{Protocol: TCP, ExternalPort: 9090, InternalPort: 90, VIP: "FD00::4", Flags: NatFlagsIPv6},
		}},
	}
	tests := []struct {
		name string
		p    PortMappingPolicy
		want string // provider's ID, "" for none
	}{
		{"same protocol and host port, every address", PortMappingPolicy{Protocol: TCP, ExternalPort: 8080, InternalPort: 80, Flags: NatFlagsLocalRoutedVip}, "b"},
		{"unspecified address is every address", PortMappingPolicy{Protocol: TCP, ExternalPort: 8080, InternalPort: 80, VIP: "0.0.0.0"}, "b"},
		{"other protocol", PortMappingPolicy{Protocol: UDP, ExternalPort: 8080, InternalPort: 80}, ""},
		{"other host port", PortMappingPolicy{Protocol: TCP, ExternalPort: 8081, InternalPort: 80}, ""},
		{"same host IP", PortMappingPolicy{Protocol: TCP, ExternalPort: 8443, InternalPort: 443, VIP: "10.0.0.4"}, "b"},
		{"other host IP", PortMappingPolicy{Protocol: TCP, ExternalPort: 8443, InternalPort: 443, VIP: "10.0.0.5"}, ""},
		{"IPv6 spelled differently", PortMappingPolicy{Protocol: TCP, ExternalPort: 9090, InternalPort: 90, VIP: "fd00:0::4", Flags: NatFlagsIPv6}, "b"},
		{"other family", PortMappingPolicy{Protocol: TCP, ExternalPort: 8080, InternalPort: 80, Flags: NatFlagsIPv6}, ""},
		{"first endpoint", PortMappingPolicy{Protocol: UDP, ExternalPort: 53, InternalPort: 53}, "a"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ProvidedBy(tt.p, cni)
			if (got == nil) != (tt.want == "") || (got != nil && got.ID != tt.want) {
				t.Fatalf("ProvidedBy(%s) = %+v, want %q", tt.p, got, tt.want)
			}
		})
	}
}
