package hostsockets

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
)

// Reading /proc/net walks the kernel's socket hash whatever it holds, so a
// pod's decision (Probe) asks each port with a bind first and reads the
// tables only for a port the bind finds taken: a loopback listener and a
// UDP socket are found and named; a free port costs no table read; and a
// port the bind finds taken is held only as the tables say (a connection's
// local port refuses a bind too, and is no listener).
func TestABindAsksFirstAndTheTablesNameWhatItFinds(t *testing.T) {
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	tcpPort, udpPort, free := uint16(l.Addr().(*net.TCPAddr).Port), bindUDP(t), freePort(t)
	ports := []Port{{hcn.TCP, tcpPort}, {hcn.UDP, udpPort}, {hcn.TCP, free}}

	socks, err := OS{Probe: true}.On(context.Background(), ports)
	if err != nil {
		t.Fatal(err)
	}
	byPort := map[uint16]Socket{}
	for _, s := range socks {
		byPort[s.Port] = s
	}
	if s := byPort[tcpPort]; s.PID != uint32(os.Getpid()) || s.Addr != netip.MustParseAddr("127.0.0.1") {
		t.Errorf("the loopback listener: %+v, want this process on 127.0.0.1", s)
	}
	if s := byPort[udpPort]; s.PID != uint32(os.Getpid()) || s.Protocol != hcn.UDP {
		t.Errorf("the UDP socket: %+v, want this process", s)
	}
	if s, ok := byPort[free]; ok {
		t.Errorf("the free port held by %+v", s)
	}

	// tables that say the free port is listened on: not read, since the
	// bind finds it free
	proc := t.TempDir()
	table := fmt.Sprintf("  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"+
		"   0: 00000000:%04X 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 0 1 0000000000000000 100 0 0 10 0\n", free)
	if err := os.MkdirAll(filepath.Join(proc, "net"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(proc, "net", "tcp"), []byte(table), 0o644); err != nil {
		t.Fatal(err)
	}
	if socks, err := (OS{Proc: proc}).On(context.Background(), []Port{{hcn.TCP, free}}); err != nil || len(socks) != 1 {
		t.Fatalf("the fake tables read: %+v, %v; want the listener they list", socks, err)
	}
	socks, err = OS{Probe: true, Proc: proc}.On(context.Background(), []Port{{hcn.TCP, free}})
	if err != nil || len(socks) != 0 {
		t.Errorf("a port the bind finds free: %+v, %v; want the tables not read", socks, err)
	}
	var asked []Port
	o := OS{Probe: true, probe: func(proto hcn.Protocol, port uint16) error {
		asked = append(asked, Port{proto, port})
		return syscall.EADDRINUSE
	}}
	socks, err = o.On(context.Background(), []Port{{hcn.TCP, free}, {hcn.TCP, tcpPort}})
	if err != nil || len(socks) != 1 || socks[0].Port != tcpPort || len(asked) != 2 {
		t.Errorf("two ports the bind finds taken, one of them listened on: %+v, %v (asked %v); want the listener alone", socks, err, asked)
	}
}
