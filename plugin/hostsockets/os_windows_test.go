package hostsockets

import (
	"context"
	"net"
	"testing"

	"golang.org/x/sys/windows"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
)

// Issue 56: Windows documents no call that lists the excluded port
// ranges, so a port no socket holds is asked with a bind: WSAEACCES (a
// range the node excludes) makes it Reserved, anything else does not; a
// port a socket holds is not asked at all. The probe is the test's: wine
// has no excluded ranges.
func TestABindWindowsForbidsIsAnExcludedRange(t *testing.T) {
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	held := uint16(l.Addr().(*net.TCPAddr).Port)
	var asked []Port
	o := OS{Probe: true, probe: func(proto hcn.Protocol, port uint16) error {
		asked = append(asked, Port{proto, port})
		switch port {
		case 50000:
			return windows.WSAEACCES
		case 50001:
			return windows.WSAEADDRINUSE
		}
		return nil
	}}
	socks, err := o.On(context.Background(), []Port{{hcn.TCP, 50000}, {hcn.UDP, 50001}, {hcn.TCP, 50002}, {hcn.TCP, held}})
	if err != nil {
		t.Fatal(err)
	}
	var reserved []Port
	for _, s := range socks {
		if s.Reserved {
			reserved = append(reserved, Port{s.Protocol, s.Port})
		}
	}
	if len(reserved) != 1 || reserved[0] != (Port{hcn.TCP, 50000}) {
		t.Errorf("reserved %v, want 50000/tcp alone", reserved)
	}
	for _, p := range asked {
		if p.Port == held {
			t.Errorf("the port a listener holds was probed too: %v", asked)
		}
	}
	if len(asked) != 3 {
		t.Errorf("asked %v, want the three ports no socket holds", asked)
	}
	// the real probe: a free port binds, and is let go
	if err := bindProbe(hcn.TCP, freePort(t)); err != nil {
		t.Errorf("bindProbe of a free port: %v", err)
	}
	if err := bindProbe(hcn.UDP, bindUDP(t)); err == nil {
		t.Error("bindProbe of a bound UDP port succeeded")
	}
	// without Probe (status, doctor) nothing is bound
	asked = nil
	o.Probe = false
	if _, err := o.On(context.Background(), []Port{{hcn.TCP, 50000}}); err != nil || len(asked) != 0 {
		t.Errorf("a read without Probe bound %v (%v)", asked, err)
	}
}
