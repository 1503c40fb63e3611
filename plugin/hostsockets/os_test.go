//go:build linux || windows

package hostsockets

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
)

// Issue 56: the node's own sockets are read from the OS (on Windows the
// iphlpapi tables, under wine here; on Linux /proc): a TCP listener and a
// UDP socket this test opens are found on their ports, with this
// process's PID and name, and a port nobody holds has none.
func TestTheOSSaysWhoHoldsAPort(t *testing.T) {
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	udpPort := bindUDP(t)
	tcpPort := uint16(l.Addr().(*net.TCPAddr).Port)
	free := freePort(t)
	socks, err := OS{}.On(context.Background(), []Port{{hcn.TCP, tcpPort}, {hcn.UDP, udpPort}, {hcn.TCP, free}})
	if err != nil {
		t.Fatal(err)
	}
	me := strings.TrimSuffix(filepath.Base(os.Args[0]), ".exe")
	for _, want := range []Socket{
		{Protocol: hcn.TCP, Addr: netip.MustParseAddr("127.0.0.1"), Port: tcpPort},
		{Protocol: hcn.UDP, Addr: netip.MustParseAddr("0.0.0.0"), Port: udpPort},
	} {
		var got *Socket
		for i := range socks {
			if socks[i].Protocol == want.Protocol && socks[i].Port == want.Port {
				got = &socks[i]
			}
		}
		if got == nil {
			t.Fatalf("%s/%d not found in %+v", want.Protocol, want.Port, socks)
		}
		if got.Addr != want.Addr {
			t.Errorf("found %+v, want it bound to %s", *got, want.Addr)
		}
		if !ownersSaid() { // wine: the rows' PIDs are 0
			continue
		}
		if got.PID != uint32(os.Getpid()) || !strings.HasPrefix(me, strings.TrimSuffix(got.Program, ".exe")) || got.Program == "" {
			t.Errorf("found %+v, want %s bound by PID %d (%s)", *got, want.Addr, os.Getpid(), me)
		}
	}
	for _, s := range socks {
		if s.Port == free {
			t.Errorf("port %d, which nobody holds, held by %+v", free, s)
		}
	}
}

// freePort is a TCP port nobody listens on (bound, then let go).
func freePort(t *testing.T) uint16 {
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return uint16(l.Addr().(*net.TCPAddr).Port)
}

// Issue 57: who holds a TCP connection's other end is read from the OS's
// connection tables (/proc/net/tcp's uid; on Windows the owner-PID table,
// under wine here): a connection this test makes is found by its two ends
// and held by this process, and one that does not exist is not.
func TestTheOSSaysWhoHoldsAConnectionsEnd(t *testing.T) {
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		if c, err := l.Accept(); err == nil {
			defer c.Close()
			_, _ = c.Read(make([]byte, 1))
		}
	}()
	c, err := net.Dial("tcp4", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	local, remote := c.LocalAddr().(*net.TCPAddr).AddrPort(), c.RemoteAddr().(*net.TCPAddr).AddrPort()
	p, err := PeerOf(local, remote)
	if err != nil {
		t.Fatalf("PeerOf(%s, %s): %v", local, remote, err)
	}
	switch {
	case runtime.GOOS == "linux" && p.UID != uint32(os.Getuid()):
		t.Errorf("the connection's end is held by %+v, want uid %d", p, os.Getuid())
	case runtime.GOOS == "windows" && ownersSaid() && p.PID != uint32(os.Getpid()): // wine: the rows' PIDs are 0
		t.Errorf("the connection's end is held by %+v, want PID %d", p, os.Getpid())
	}
	if _, err := PeerOf(netip.AddrPortFrom(local.Addr(), freePort(t)), remote); !errors.Is(err, ErrNoPeer) {
		t.Errorf("a connection that does not exist: %v, want ErrNoPeer", err)
	}
}
