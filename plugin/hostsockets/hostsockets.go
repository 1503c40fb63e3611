// Package hostsockets says which of the node's own programs hold a host
// port: a TCP listener or a bound UDP socket on the port, on the address a
// mapping would take traffic for. A WinNAT static mapping (what an HNS
// PortMapping policy is) takes the port's inbound traffic whoever listens
// on it (issue 56), so a port a program of the node holds is never mapped.
package hostsockets

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"path"
	"strings"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
)

// Socket is a socket of the node bound to a port.
type Socket struct {
	Protocol hcn.Protocol
	Addr     netip.Addr // the address it is bound to (unspecified: every address)
	Port     uint16
	PID      uint32 // 0: the OS did not say
	Program  string // the process's image or command name; "" when not known
	// Reserved: no program, the OS forbids binding the port (on Windows a
	// port in a range the node excludes: Hyper-V's, WinNAT's, an
	// administrator's); it holds the port on every address
	Reserved bool
}

// String names the socket as an operator finds it (netstat -ano, Get-Process
// -Id): the program, its PID, and where it is bound.
func (s Socket) String() string {
	if s.Reserved {
		return fmt.Sprintf("a port range the node excludes (%d/%s; netsh int ipv4 show excludedportrange protocol=%s lists them: "+
			"Hyper-V and WinNAT reserve dynamic ranges): a mapping there is unreachable", s.Port, s.Protocol, s.Protocol)
	}
	who := s.Program
	switch {
	case who == "" && s.PID == 0:
		who = "a program the OS does not name"
	case who == "":
		who = fmt.Sprintf("PID %d", s.PID)
	case s.PID != 0:
		who = fmt.Sprintf("%s (PID %d)", who, s.PID)
	}
	verb := "listening on"
	if s.Protocol == hcn.UDP {
		verb = "bound to"
	}
	return fmt.Sprintf("%s %s %s/%s", who, verb, netip.AddrPortFrom(s.Addr, s.Port), s.Protocol)
}

// Port is a protocol and port to read the sockets of.
type Port struct {
	Protocol hcn.Protocol
	Port     uint16
}

// Reader reads the node's sockets on some ports: the OS boundary (OS is
// the node's; tests give a table).
type Reader interface {
	On(ctx context.Context, ports []Port) ([]Socket, error)
}

// PortsOf is the protocols and ports of policies, each once, in their
// order.
func PortsOf(policies []hcn.PortMappingPolicy) []Port {
	var out []Port
	seen := map[Port]bool{}
	for _, p := range policies {
		q := Port{Protocol: p.Protocol, Port: p.ExternalPort}
		if !seen[q] {
			out, seen[q] = append(out, q), true
		}
	}
	return out
}

// set is ports as a set: a table's rows are matched against it in
// constant time (a range asks a thousand ports).
func set(ports []Port) map[Port]bool {
	s := make(map[Port]bool, len(ports))
	for _, p := range ports {
		s[p] = true
	}
	return s
}

// Holding is the first socket of socks that holds what p maps: the same
// protocol and port, bound to an address p takes traffic for. A socket on
// every address (0.0.0.0, ::) holds the port for any host IP; one on an
// address, for p on that address or on every address. An IPv6 socket on
// :: is taken to hold IPv4 too (a dual-stack socket, the default of Go and
// of Windows' own servers: the tables do not say IPV6_V6ONLY).
func Holding(socks []Socket, p hcn.PortMappingPolicy) (Socket, bool) {
	var vip netip.Addr
	if p.VIP != "" {
		a, err := netip.ParseAddr(p.VIP)
		if err != nil {
			return Socket{}, false
		}
		vip = a.Unmap()
	}
	for _, s := range socks {
		if s.Protocol != p.Protocol || s.Port != p.ExternalPort {
			continue
		}
		if s.Reserved {
			return s, true
		}
		a := s.Addr.Unmap()
		sameFamily := a.Is6() == p.IsIPv6() || (a.Is6() && a.IsUnspecified())
		if !sameFamily {
			continue
		}
		if a.IsUnspecified() || !vip.IsValid() || vip.IsUnspecified() || a == vip {
			return s, true
		}
	}
	return Socket{}, false
}

// ErrHeld: a program of the node holds a host port the pod asks for.
var ErrHeld = errors.New("a program of the node holds the host port")

// HeldError is a mapping refused because a program of the node holds its
// host port: which mapping, and the socket.
type HeldError struct {
	Policy hcn.PortMappingPolicy
	By     Socket
}

func (e *HeldError) Error() string {
	if e.By.Reserved {
		return fmt.Sprintf("host port %s is in %s; ask a port outside the ranges", e.Policy, e.By)
	}
	return fmt.Sprintf("host port %s is held by the node's program %s: a mapping would take the traffic it is sent; "+
		"stop that program or ask another port (netstat -ano shows it)", e.Policy, e.By)
}

// Is makes errors.Is(err, ErrHeld) true.
func (e *HeldError) Is(target error) bool { return target == ErrHeld }

// imageBase is the file name of a process image path, either separator.
func imageBase(p string) string {
	return path.Base(strings.ReplaceAll(p, `\`, "/"))
}

// Peer is the process at one end of a TCP connection on the node: its
// user on Linux, its PID on Windows.
type Peer struct {
	UID uint32
	PID uint32
}

// ErrNoPeer: the node's tables show no such connection.
var ErrNoPeer = errors.New("no such connection on the node")
