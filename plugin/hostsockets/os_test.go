//go:build linux || windows

package hostsockets

import (
	"context"
	"net"
	"net/netip"
	"os"
	"path/filepath"
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
