package hostsockets

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
)

// Issue 56: which host socket holds what a mapping maps, from a table of
// the node's sockets: an IPv4 and an IPv6 listener, a UDP socket, a
// listener on another host IP, a loopback one, a dual-stack one.
func TestAPortAProgramHoldsIsFoundByProtocolPortAndAddress(t *testing.T) {
	socks := []Socket{
		{Protocol: hcn.TCP, Addr: netip.MustParseAddr("0.0.0.0"), Port: 1433, PID: 2100, Program: "sqlservr.exe"},
		{Protocol: hcn.TCP, Addr: netip.MustParseAddr("10.0.0.5"), Port: 6516, PID: 3300, Program: "sme.exe"},
		{Protocol: hcn.TCP, Addr: netip.MustParseAddr("127.0.0.1"), Port: 8126, PID: 4400, Program: "trace-agent.exe"},
		{Protocol: hcn.TCP, Addr: netip.MustParseAddr("fd00::5"), Port: 9100, PID: 5500, Program: "exporter.exe"},
		{Protocol: hcn.UDP, Addr: netip.MustParseAddr("0.0.0.0"), Port: 8125, PID: 4401, Program: "agent.exe"},
		{Protocol: hcn.TCP, Addr: netip.MustParseAddr("::"), Port: 5985, PID: 4, Program: "System"},
	}
	pm := func(proto hcn.Protocol, vip string, port uint16, v6 bool) hcn.PortMappingPolicy {
		p := hcn.PortMappingPolicy{Protocol: proto, ExternalPort: port, InternalPort: 80, VIP: vip}
		if v6 {
			p.Flags = hcn.NatFlagsIPv6
		}
		return p
	}
	for _, tc := range []struct {
		name string
		p    hcn.PortMappingPolicy
		by   uint32 // PID; 0: free
	}{
		{"every address, a listener on every address", pm(hcn.TCP, "", 1433, false), 2100},
		{"a host IP, a listener on every address", pm(hcn.TCP, "10.0.0.4", 1433, false), 2100},
		{"the other protocol is free", pm(hcn.UDP, "", 1433, false), 0},
		{"another port is free", pm(hcn.TCP, "", 1434, false), 0},
		{"every address, a listener on one", pm(hcn.TCP, "", 6516, false), 3300},
		{"the listener's host IP", pm(hcn.TCP, "10.0.0.5", 6516, false), 3300},
		{"another host IP than the listener's is free", pm(hcn.TCP, "10.0.0.4", 6516, false), 0},
		{"IPv4, an IPv6 listener on one address is free", pm(hcn.TCP, "", 9100, false), 0},
		{"IPv6, the IPv6 listener", pm(hcn.TCP, "", 9100, true), 5500},
		{"IPv6, an IPv4 listener on every address is free", pm(hcn.TCP, "", 1433, true), 0},
		{"every address, a loopback listener", pm(hcn.TCP, "", 8126, false), 4400},
		{"a UDP socket", pm(hcn.UDP, "", 8125, false), 4401},
		{"IPv4, a dual-stack listener on ::", pm(hcn.TCP, "10.0.0.4", 5985, false), 4},
		{"IPv6, a dual-stack listener on ::", pm(hcn.TCP, "fd00::4", 5985, true), 4},
		{"an IPv4-mapped host IP is the IPv4 address", pm(hcn.TCP, "::ffff:10.0.0.5", 6516, false), 3300},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, ok := Holding(socks, tc.p)
			if ok != (tc.by != 0) || (ok && s.PID != tc.by) {
				t.Fatalf("Holding(%s) = %+v, %v; want PID %d", tc.p, s, ok, tc.by)
			}
		})
	}
}

// The error names the mapping, the program, its PID and where it listens,
// and is ErrHeld.
func TestAHeldPortSaysWhichProgramHoldsIt(t *testing.T) {
	err := fmt.Errorf("pod default/db: %w", &HeldError{Policy: hcn.PortMappingPolicy{Protocol: hcn.TCP, ExternalPort: 1433, InternalPort: 1433},
		By: Socket{Protocol: hcn.TCP, Addr: netip.MustParseAddr("0.0.0.0"), Port: 1433, PID: 2100, Program: "sqlservr.exe"}})
	var he *HeldError
	if !errors.Is(err, ErrHeld) || !errors.As(err, &he) {
		t.Fatalf("%v: want ErrHeld and a *HeldError", err)
	}
	for _, want := range []string{"*:1433->1433/tcp", "sqlservr.exe (PID 2100) listening on 0.0.0.0:1433/tcp"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q does not say %q", err, want)
		}
	}
	for _, tc := range []struct {
		s    Socket
		want string
	}{
		{Socket{Protocol: hcn.UDP, Addr: netip.MustParseAddr("::"), Port: 53, PID: 900}, "PID 900 bound to [::]:53/udp"},
		{Socket{Protocol: hcn.TCP, Addr: netip.MustParseAddr("10.0.0.5"), Port: 80}, "a program the OS does not name listening on 10.0.0.5:80/tcp"},
	} {
		if got := tc.s.String(); got != tc.want {
			t.Errorf("%+v says %q, want %q", tc.s, got, tc.want)
		}
	}
}

func TestPortsOfNamesEachProtocolAndPortOnce(t *testing.T) {
	got := PortsOf([]hcn.PortMappingPolicy{{Protocol: hcn.TCP, ExternalPort: 80}, {Protocol: hcn.TCP, ExternalPort: 80, Flags: hcn.NatFlagsIPv6},
		{Protocol: hcn.UDP, ExternalPort: 80}})
	if len(got) != 2 || got[0] != (Port{hcn.TCP, 80}) || got[1] != (Port{hcn.UDP, 80}) {
		t.Fatalf("PortsOf = %v", got)
	}
}

// Issue 56: a port in a range the node excludes holds the port for every
// address and family, and says where to see the ranges.
func TestAPortInAnExcludedRangeIsHeld(t *testing.T) {
	r := Socket{Protocol: hcn.TCP, Addr: netip.IPv4Unspecified(), Port: 50000, Reserved: true}
	for _, p := range []hcn.PortMappingPolicy{
		{Protocol: hcn.TCP, ExternalPort: 50000, InternalPort: 80},
		{Protocol: hcn.TCP, ExternalPort: 50000, InternalPort: 80, VIP: "10.0.0.4"},
		{Protocol: hcn.TCP, ExternalPort: 50000, InternalPort: 80, Flags: hcn.NatFlagsIPv6},
	} {
		if s, ok := Holding([]Socket{r}, p); !ok || !s.Reserved {
			t.Errorf("Holding(%s) = %+v, %v; want the excluded range", p, s, ok)
		}
	}
	if _, ok := Holding([]Socket{r}, hcn.PortMappingPolicy{Protocol: hcn.UDP, ExternalPort: 50000, InternalPort: 80}); ok {
		t.Error("a TCP exclusion holds the UDP port")
	}
	err := (&HeldError{Policy: hcn.PortMappingPolicy{Protocol: hcn.TCP, ExternalPort: 50000, InternalPort: 80}, By: r}).Error()
	for _, want := range []string{"host port *:50000->80/tcp is in a port range the node excludes", "netsh int ipv4 show excludedportrange protocol=tcp"} {
		if !strings.Contains(err, want) {
			t.Errorf("%q does not say %q", err, want)
		}
	}
}
