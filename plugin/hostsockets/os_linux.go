package hostsockets

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
)

// OS reads the node's sockets as Linux says them (the simulator's node):
// /proc/net/tcp, tcp6 (listeners), udp and udp6 (every bound socket), then
// the process holding each socket found, by its inode among /proc/*/fd.
// Reading those tables walks the kernel's socket hash whatever it holds
// (about 10 ms for the four on the bench's machine, empty), so with Probe
// (a pod's decision) each port is first asked with a bind on [::] (both
// families), let go at once, and only a port the bind finds taken is read
// in the tables, to name its holder.
type OS struct {
	Proc  string // "" is /proc
	Probe bool
	// probe binds a port (nil: the real bind; a test sets its own)
	probe func(proto hcn.Protocol, port uint16) error
}

// On reads the sockets bound to ports.
func (o OS) On(ctx context.Context, ports []Port) ([]Socket, error) {
	if o.Probe {
		ports = o.taken(ports)
	}
	if len(ports) == 0 {
		return nil, ctx.Err()
	}
	// the tables decide: a TCP bind is refused by a connection's local
	// port too (an outgoing connection's ephemeral port), which is no
	// listener, as Windows' listener table does not show it either
	socks, err := o.tables(ports)
	if err != nil {
		return nil, err
	}
	return socks, ctx.Err()
}

// taken is the ports of ports a bind finds in use.
func (o OS) taken(ports []Port) []Port {
	probe := o.probe
	if probe == nil {
		probe = bindProbe
	}
	var out []Port
	for _, p := range ports {
		if errors.Is(probe(p.Protocol, p.Port), syscall.EADDRINUSE) {
			out = append(out, p)
		}
	}
	return out
}

// bindProbe binds port on [::] (IPv4 too; 0.0.0.0 where the node has no
// IPv6) for proto and closes the socket at once. TCP sets SO_REUSEADDR,
// as servers do, so that only a listener takes the port, not a
// connection's leftover TIME_WAIT.
func bindProbe(proto hcn.Protocol, port uint16) error {
	typ := syscall.SOCK_STREAM
	if proto == hcn.UDP {
		typ = syscall.SOCK_DGRAM
	}
	var sa syscall.Sockaddr = &syscall.SockaddrInet6{Port: int(port)}
	fd, err := syscall.Socket(syscall.AF_INET6, typ|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		sa = &syscall.SockaddrInet4{Port: int(port)}
		if fd, err = syscall.Socket(syscall.AF_INET, typ|syscall.SOCK_CLOEXEC, 0); err != nil {
			return err
		}
	} else if err := syscall.SetsockoptInt(fd, syscall.IPPROTO_IPV6, syscall.IPV6_V6ONLY, 0); err != nil {
		syscall.Close(fd)
		return err
	}
	defer syscall.Close(fd)
	if proto == hcn.TCP {
		if err := syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1); err != nil {
			return err
		}
	}
	return syscall.Bind(fd, sa)
}

// tables reads the sockets bound to ports from /proc, with their holders.
func (o OS) tables(ports []Port) ([]Socket, error) {
	proc := o.Proc
	if proc == "" {
		proc = "/proc"
	}
	var out []Socket
	want := set(ports)
	inodes := map[string][]int{} // inode -> indexes in out
	for _, t := range []struct {
		file  string
		proto hcn.Protocol
	}{{"net/tcp", hcn.TCP}, {"net/tcp6", hcn.TCP}, {"net/udp", hcn.UDP}, {"net/udp6", hcn.UDP}} {
		socks, err := readTable(filepath.Join(proc, t.file), t.proto, want)
		if err != nil {
			return nil, err
		}
		for _, s := range socks {
			inodes[s.inode] = append(inodes[s.inode], len(out))
			out = append(out, s.Socket)
		}
	}
	if len(out) > 0 {
		owners(proc, inodes, out)
	}
	return out, nil
}

type found struct {
	Socket
	inode string
}

// readTable reads one /proc/net table: its listening (TCP) or bound (UDP)
// sockets on ports. A table the kernel does not have (no IPv6) is empty.
func readTable(file string, proto hcn.Protocol, ports map[Port]bool) ([]found, error) {
	f, err := os.Open(file)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the node's sockets: %w", err)
	}
	defer f.Close()
	var out []found
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
		fields := strings.Fields(sc.Text())
		if len(fields) < 10 || (proto == hcn.TCP && fields[3] != "0A") { // TCP_LISTEN
			continue
		}
		addr, port, ok := parseAddr(fields[1])
		if !ok || !ports[Port{Protocol: proto, Port: port}] {
			continue
		}
		out = append(out, found{Socket: Socket{Protocol: proto, Addr: addr, Port: port}, inode: fields[9]})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading the node's sockets: %s: %w", file, err)
	}
	return out, nil
}

// parseAddr reads a /proc/net address, ADDR:PORT in hex, the address as
// 32-bit words in host order (little-endian here).
func parseAddr(s string) (netip.Addr, uint16, bool) {
	h, p, ok := strings.Cut(s, ":")
	port, err := strconv.ParseUint(p, 16, 16)
	raw, herr := hex.DecodeString(h)
	if !ok || err != nil || herr != nil || (len(raw) != 4 && len(raw) != 16) {
		return netip.Addr{}, 0, false
	}
	b := make([]byte, len(raw))
	for i := 0; i < len(raw); i += 4 {
		binary.LittleEndian.PutUint32(b[i:], binary.BigEndian.Uint32(raw[i:]))
	}
	addr, _ := netip.AddrFromSlice(b)
	return addr, uint16(port), true
}

// owners fills in the process holding each socket: its PID and command
// name, found by the socket's inode among the processes' descriptors.
func owners(proc string, inodes map[string][]int, out []Socket) {
	procs, _ := filepath.Glob(filepath.Join(proc, "[0-9]*"))
	for _, dir := range procs {
		fds, _ := os.ReadDir(filepath.Join(dir, "fd"))
		for _, fd := range fds {
			l, err := os.Readlink(filepath.Join(dir, "fd", fd.Name()))
			if err != nil || !strings.HasPrefix(l, "socket:[") {
				continue
			}
			idx, ok := inodes[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")]
			if !ok {
				continue
			}
			pid, _ := strconv.ParseUint(filepath.Base(dir), 10, 32)
			comm, _ := os.ReadFile(filepath.Join(dir, "comm"))
			for _, i := range idx {
				if out[i].PID == 0 {
					out[i].PID, out[i].Program = uint32(pid), strings.TrimSpace(string(comm))
				}
			}
		}
	}
}

// PeerOf is who holds the local end local of the node's TCP connection
// whose other end is remote: the uid /proc/net/tcp and tcp6 give its
// socket. An IPv4 connection to an IPv6 socket shows as v4-mapped there.
func PeerOf(local, remote netip.AddrPort) (Peer, error) {
	for _, file := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		f, err := os.Open(file)
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			return Peer{}, fmt.Errorf("reading the node's connections: %w", err)
		}
		p, ok, err := peerIn(f, local, remote)
		f.Close()
		if err != nil || ok {
			return p, err
		}
	}
	return Peer{}, fmt.Errorf("%w: %s to %s", ErrNoPeer, local, remote)
}

func peerIn(f *os.File, local, remote netip.AddrPort) (Peer, bool, error) {
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
		fields := strings.Fields(sc.Text())
		if len(fields) < 10 {
			continue
		}
		la, lp, ok1 := parseAddr(fields[1])
		ra, rp, ok2 := parseAddr(fields[2])
		if !ok1 || !ok2 || lp != local.Port() || rp != remote.Port() || la.Unmap() != local.Addr().Unmap() || ra.Unmap() != remote.Addr().Unmap() {
			continue
		}
		uid, err := strconv.ParseUint(fields[7], 10, 32)
		if err != nil {
			return Peer{}, false, fmt.Errorf("reading the node's connections: uid %q", fields[7])
		}
		return Peer{UID: uint32(uid)}, true, nil
	}
	return Peer{}, false, sc.Err()
}
