package hostsockets

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"unsafe"

	"golang.org/x/sys/windows"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
)

// OS reads the node's sockets as Windows says them: GetExtendedTcpTable
// (TCP_TABLE_OWNER_PID_LISTENER) and GetExtendedUdpTable
// (UDP_TABLE_OWNER_PID), IPv4 and IPv6, each row with its owning PID,
// then the image name of each holder found. Windows has no documented call
// that lists the excluded port ranges netsh shows (Hyper-V's, WinNAT's),
// so with Probe each port no socket holds is asked the way that is
// documented: a bind of it on 0.0.0.0, let go at once, which Windows
// refuses with WSAEACCES inside an excluded range (docker/for-win 3171);
// such a port is a Reserved socket. Only a port about to be mapped is
// probed (the plugin's decision); status and doctor read the tables.
type OS struct {
	Probe bool
	// probe binds a port of a protocol on 0.0.0.0 and lets it go (nil:
	// the real bind; a test sets its own)
	probe func(proto hcn.Protocol, port uint16) error
}

const (
	tcpTableOwnerPIDListener = 3
	udpTableOwnerPID         = 1
	errInsufficientBuffer    = 122
)

// table is one of the four tables: where a row's fields are.
type table struct {
	fn                         string
	proto                      hcn.Protocol
	af                         uint32
	class                      uintptr
	row, addrAt, portAt, pidAt int
	addrLen                    int
}

var tables = []table{
	// MIB_TCPROW_OWNER_PID: dwState, dwLocalAddr, dwLocalPort, dwRemoteAddr, dwRemotePort, dwOwningPid
	{"GetExtendedTcpTable", hcn.TCP, windows.AF_INET, tcpTableOwnerPIDListener, 24, 4, 8, 20, 4},
	// MIB_TCP6ROW_OWNER_PID: ucLocalAddr[16], dwLocalScopeId, dwLocalPort, ucRemoteAddr[16], dwRemoteScopeId, dwRemotePort, dwState, dwOwningPid
	{"GetExtendedTcpTable", hcn.TCP, windows.AF_INET6, tcpTableOwnerPIDListener, 56, 0, 20, 52, 16},
	// MIB_UDPROW_OWNER_PID: dwLocalAddr, dwLocalPort, dwOwningPid
	{"GetExtendedUdpTable", hcn.UDP, windows.AF_INET, udpTableOwnerPID, 12, 0, 4, 8, 4},
	// MIB_UDP6ROW_OWNER_PID: ucLocalAddr[16], dwLocalScopeId, dwLocalPort, dwOwningPid
	{"GetExtendedUdpTable", hcn.UDP, windows.AF_INET6, udpTableOwnerPID, 28, 0, 20, 24, 16},
}

// On reads the sockets bound to ports.
func (o OS) On(ctx context.Context, ports []Port) ([]Socket, error) {
	if len(ports) == 0 {
		return nil, nil
	}
	dll := windows.NewLazySystemDLL("iphlpapi.dll")
	want := set(ports)
	var out []Socket
	for _, t := range tables {
		if !wanted(ports, t.proto) {
			continue
		}
		buf, err := read(dll.NewProc(t.fn), t)
		if err != nil {
			return nil, fmt.Errorf("reading the node's sockets (%s): %w", t.fn, err)
		}
		out = append(out, parse(buf, t, want)...)
	}
	if o.Probe {
		out = append(out, o.reserved(ports, out)...)
	}
	names := map[uint32]string{}
	for i := range out {
		if out[i].Reserved {
			continue
		}
		pid := out[i].PID
		if _, ok := names[pid]; !ok {
			names[pid] = imageName(pid)
		}
		out[i].Program = names[pid]
	}
	return out, ctx.Err()
}

// reserved asks a bind of each port of ports no socket of found holds:
// those Windows forbids (WSAEACCES) are in a range the node excludes.
func (o OS) reserved(ports []Port, found []Socket) []Socket {
	probe := o.probe
	if probe == nil {
		probe = bindProbe
	}
	held := map[Port]bool{}
	for _, s := range found {
		held[Port{Protocol: s.Protocol, Port: s.Port}] = true
	}
	var out []Socket
	for _, p := range ports {
		if held[p] {
			continue
		}
		if err := probe(p.Protocol, p.Port); errors.Is(err, windows.WSAEACCES) {
			out = append(out, Socket{Protocol: p.Protocol, Addr: netip.IPv4Unspecified(), Port: p.Port, Reserved: true})
		}
	}
	return out
}

// bindProbe binds port on 0.0.0.0 for proto and closes the socket at once.
func bindProbe(proto hcn.Protocol, port uint16) error {
	typ, ipproto := windows.SOCK_STREAM, windows.IPPROTO_TCP
	if proto == hcn.UDP {
		typ, ipproto = windows.SOCK_DGRAM, windows.IPPROTO_UDP
	}
	s, err := windows.Socket(windows.AF_INET, typ, ipproto)
	if err != nil {
		return err
	}
	defer windows.Closesocket(s)
	return windows.Bind(s, &windows.SockaddrInet4{Port: int(port)})
}

func wanted(ports []Port, proto hcn.Protocol) bool {
	for _, p := range ports {
		if p.Protocol == proto {
			return true
		}
	}
	return false
}

// read calls fn for t's table, growing the buffer while the table grows.
func read(fn *windows.LazyProc, t table) ([]byte, error) {
	if err := fn.Find(); err != nil {
		return nil, err
	}
	size := uint32(0)
	for range 5 {
		var p uintptr
		buf := make([]byte, max(size, 4))
		p = uintptr(unsafe.Pointer(&buf[0]))
		r, _, _ := fn.Call(p, uintptr(unsafe.Pointer(&size)), 0, uintptr(t.af), t.class, 0)
		switch r {
		case 0:
			return buf, nil
		case errInsufficientBuffer:
			continue
		default:
			return nil, windows.Errno(r)
		}
	}
	return nil, errors.New("the table kept growing")
}

// parse reads a table's rows on ports: dwNumEntries, then the rows. Ports
// are in network order in a DWORD's low 16 bits; addresses in network
// order.
func parse(buf []byte, t table, ports map[Port]bool) []Socket {
	if len(buf) < 4 {
		return nil
	}
	n := binary.LittleEndian.Uint32(buf)
	var out []Socket
	for i := 0; i < int(n) && 4+(i+1)*t.row <= len(buf); i++ {
		r := buf[4+i*t.row:]
		port := binary.BigEndian.Uint16(r[t.portAt:])
		if !ports[Port{Protocol: t.proto, Port: port}] {
			continue
		}
		addr, _ := netip.AddrFromSlice(r[t.addrAt : t.addrAt+t.addrLen])
		out = append(out, Socket{Protocol: t.proto, Addr: addr, Port: port, PID: binary.LittleEndian.Uint32(r[t.pidAt:])})
	}
	return out
}

// imageName is the file name of the process's image; "System" for PID 4
// (http.sys's listeners: WinRM, IIS, and kernel drivers'), "" when it
// cannot be read.
func imageName(pid uint32) string {
	if pid == 4 {
		return "System"
	}
	h, err := windows.OpenProcess(windows.PROCESS_QUERY_LIMITED_INFORMATION, false, pid)
	if err != nil {
		return ""
	}
	defer windows.CloseHandle(h)
	buf := make([]uint16, windows.MAX_PATH)
	size := uint32(len(buf))
	if err := windows.QueryFullProcessImageName(h, 0, &buf[0], &size); err != nil {
		return ""
	}
	return imageBase(windows.UTF16ToString(buf[:size]))
}

// tcpTableOwnerPIDConnections is TCP_TABLE_OWNER_PID_CONNECTIONS.
const tcpTableOwnerPIDConnections = 4

// connections are the two connection tables: where a row's local and
// remote address and port and its PID are.
var connections = []struct {
	table
	remAddrAt, remPortAt int
}{
	// MIB_TCPROW_OWNER_PID: dwState, dwLocalAddr, dwLocalPort, dwRemoteAddr, dwRemotePort, dwOwningPid
	{table{"GetExtendedTcpTable", hcn.TCP, windows.AF_INET, tcpTableOwnerPIDConnections, 24, 4, 8, 20, 4}, 12, 16},
	// MIB_TCP6ROW_OWNER_PID: ucLocalAddr[16], dwLocalScopeId, dwLocalPort, ucRemoteAddr[16], dwRemoteScopeId, dwRemotePort, dwState, dwOwningPid
	{table{"GetExtendedTcpTable", hcn.TCP, windows.AF_INET6, tcpTableOwnerPIDConnections, 56, 0, 20, 52, 16}, 24, 44},
}

// PeerOf is who holds the local end local of the node's TCP connection
// whose other end is remote: its PID, from GetExtendedTcpTable
// (TCP_TABLE_OWNER_PID_CONNECTIONS).
func PeerOf(local, remote netip.AddrPort) (Peer, error) {
	fn := windows.NewLazySystemDLL("iphlpapi.dll").NewProc("GetExtendedTcpTable")
	for _, c := range connections {
		buf, err := read(fn, c.table)
		if err != nil {
			return Peer{}, fmt.Errorf("reading the node's connections: %w", err)
		}
		n := uint32(0)
		if len(buf) >= 4 {
			n = binary.LittleEndian.Uint32(buf)
		}
		for i := 0; i < int(n) && 4+(i+1)*c.row <= len(buf); i++ {
			r := buf[4+i*c.row:]
			la, _ := netip.AddrFromSlice(r[c.addrAt : c.addrAt+c.addrLen])
			ra, _ := netip.AddrFromSlice(r[c.remAddrAt : c.remAddrAt+c.addrLen])
			if binary.BigEndian.Uint16(r[c.portAt:]) == local.Port() && binary.BigEndian.Uint16(r[c.remPortAt:]) == remote.Port() &&
				la.Unmap() == local.Addr().Unmap() && ra.Unmap() == remote.Addr().Unmap() {
				return Peer{PID: binary.LittleEndian.Uint32(r[c.pidAt:])}, nil
			}
		}
	}
	return Peer{}, fmt.Errorf("%w: %s to %s", ErrNoPeer, local, remote)
}
