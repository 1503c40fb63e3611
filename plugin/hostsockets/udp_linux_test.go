package hostsockets

import (
	"net"
	"testing"
)

// bindUDP binds a UDP socket on 0.0.0.0 for the test's life: its port.
func bindUDP(t *testing.T) uint16 {
	u, err := net.ListenPacket("udp4", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { u.Close() })
	return uint16(u.LocalAddr().(*net.UDPAddr).Port)
}

// ownersSaid: Linux says each socket's owner (its inode among /proc/*/fd).
func ownersSaid() bool { return true }
