package hcn

import (
	"testing"
)

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
			if (got == nil) != (tt.want == "") || (got != nil && got.Endpoint.ID != tt.want) {
				t.Fatalf("ProvidedBy(%s) = %+v, want %q", tt.p, got, tt.want)
			}
		})
	}
}
