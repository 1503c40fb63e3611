package request

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
)

func TestBuildPolicies(t *testing.T) {
	v4 := netip.MustParseAddr("10.0.0.4")
	v6 := netip.MustParseAddr("fd00::4")
	tests := []struct {
		name string
		in   []PortMapping
		opt  PolicyOptions
		want []hcn.PortMappingPolicy
	}{
		{"tcp no host ip, local routed", []PortMapping{{Protocol: hcn.TCP, HostPort: 8080, ContainerPort: 80}},
			PolicyOptions{LocalRoutedVIP: true},
			[]hcn.PortMappingPolicy{{Protocol: 6, ExternalPort: 8080, InternalPort: 80, Flags: 1}}},
		{"udp protocol number, no flags", []PortMapping{{Protocol: hcn.UDP, HostPort: 53, ContainerPort: 5353}},
			PolicyOptions{},
			[]hcn.PortMappingPolicy{{Protocol: 17, ExternalPort: 53, InternalPort: 5353}}},
		{"ipv4 host ip is the VIP", []PortMapping{{Protocol: hcn.TCP, HostPort: 8443, ContainerPort: 443, HostIP: v4}},
			PolicyOptions{LocalRoutedVIP: true, DualStack: true},
			[]hcn.PortMappingPolicy{{Protocol: 6, ExternalPort: 8443, InternalPort: 443, VIP: "10.0.0.4", Flags: 1}}},
		{"ipv6 host ip sets the IPv6 flag", []PortMapping{{Protocol: hcn.TCP, HostPort: 8080, ContainerPort: 80, HostIP: v6}},
			PolicyOptions{LocalRoutedVIP: true},
			[]hcn.PortMappingPolicy{{Protocol: 6, ExternalPort: 8080, InternalPort: 80, VIP: "fd00::4", Flags: 3}}},
		{"ipv6 host ip without local routing", []PortMapping{{Protocol: hcn.UDP, HostPort: 8080, ContainerPort: 80, HostIP: v6}},
			PolicyOptions{},
			[]hcn.PortMappingPolicy{{Protocol: 17, ExternalPort: 8080, InternalPort: 80, VIP: "fd00::4", Flags: 2}}},
		{"dual stack without host ip gives both", []PortMapping{{Protocol: hcn.TCP, HostPort: 8080, ContainerPort: 80}},
			PolicyOptions{LocalRoutedVIP: true, DualStack: true},
			[]hcn.PortMappingPolicy{{Protocol: 6, ExternalPort: 8080, InternalPort: 80, Flags: 1}, {Protocol: 6, ExternalPort: 8080, InternalPort: 80, Flags: 3}}},
		{"unspecified v4 is v4 only, no VIP", []PortMapping{{Protocol: hcn.TCP, HostPort: 80, ContainerPort: 80, HostIP: netip.IPv4Unspecified()}},
			PolicyOptions{DualStack: true},
			[]hcn.PortMappingPolicy{{Protocol: 6, ExternalPort: 80, InternalPort: 80}}},
		{"unspecified v6 is v6 only, no VIP", []PortMapping{{Protocol: hcn.TCP, HostPort: 80, ContainerPort: 80, HostIP: netip.IPv6Unspecified()}},
			PolicyOptions{DualStack: true},
			[]hcn.PortMappingPolicy{{Protocol: 6, ExternalPort: 80, InternalPort: 80, Flags: 2}}},
		{"sorted canonically", []PortMapping{{Protocol: hcn.UDP, HostPort: 1, ContainerPort: 1}, {Protocol: hcn.TCP, HostPort: 9, ContainerPort: 9}, {Protocol: hcn.TCP, HostPort: 2, ContainerPort: 2}},
			PolicyOptions{},
			[]hcn.PortMappingPolicy{{Protocol: 6, ExternalPort: 2, InternalPort: 2}, {Protocol: 6, ExternalPort: 9, InternalPort: 9}, {Protocol: 17, ExternalPort: 1, InternalPort: 1}}},
		{"none", nil, PolicyOptions{}, []hcn.PortMappingPolicy{}},
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

// A mapping is held when the host ports in place map every policy it is
// built into, whatever their other flags: a new container port, a new
// address family (dual stack turned on) or a new host port is not.
func TestUnheld(t *testing.T) {
	held := []hcn.PortMappingPolicy{{Protocol: hcn.TCP, ExternalPort: 8080, InternalPort: 80, VIP: "0.0.0.0"}} // no flags, VIP spelled out
	web := PortMapping{Protocol: hcn.TCP, HostPort: 8080, ContainerPort: 80}
	rdp := PortMapping{Protocol: hcn.TCP, HostPort: 3389, ContainerPort: 3389}
	moved := PortMapping{Protocol: hcn.TCP, HostPort: 8080, ContainerPort: 81}
	for _, tc := range []struct {
		name          string
		ms, annotated []PortMapping
		opt           PolicyOptions
		want, wantAnn []PortMapping
	}{
		{"held, flags aside", []PortMapping{web}, []PortMapping{web}, PolicyOptions{LocalRoutedVIP: true}, nil, nil},
		{"a new mapping beside", []PortMapping{web, rdp}, []PortMapping{rdp}, PolicyOptions{LocalRoutedVIP: true}, []PortMapping{rdp}, []PortMapping{rdp}},
		{"another container port", []PortMapping{moved}, nil, PolicyOptions{}, []PortMapping{moved}, nil},
		{"dual stack adds IPv6", []PortMapping{web}, nil, PolicyOptions{DualStack: true}, []PortMapping{web}, nil},
	} {
		got, gotAnn := Unheld(tc.ms, tc.annotated, tc.opt, held)
		if !slices.Equal(got, tc.want) || !slices.Equal(gotAnn, tc.wantAnn) {
			t.Errorf("%s: %v, %v; want %v, %v", tc.name, got, gotAnn, tc.want, tc.wantAnn)
		}
	}
}

// Test oracles: the plain definitions the fast code is checked against.

// defaultLimits are the limits of a default configuration
// (config.Default: plugin.max_mappings_per_pod, plugin.max_annotation_bytes).
func defaultLimits() Limits { return Limits{MaxMappings: 64, MaxBytes: 16 << 10} }

// Overlap reports whether two mappings claim the same host port: same
// protocol and host port, and host IPs that can coincide (no host IP, or an
// unspecified one of the same family, overlaps every address).
func Overlap(a, b PortMapping) bool {
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
