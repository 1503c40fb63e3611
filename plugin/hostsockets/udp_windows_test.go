package hostsockets

import (
	"testing"

	"golang.org/x/sys/windows"
)

// bindUDP binds a UDP socket on 0.0.0.0 for the test's life: its port.
// Winsock directly: Go's net sets SIO_UDP_CONNRESET on every UDP socket,
// which wine refuses (WSAEOPNOTSUPP); the table read is the same either way.
func bindUDP(t *testing.T) uint16 {
	s, err := windows.Socket(windows.AF_INET, windows.SOCK_DGRAM, windows.IPPROTO_UDP)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { windows.Closesocket(s) })
	if err := windows.Bind(s, &windows.SockaddrInet4{}); err != nil {
		t.Fatal(err)
	}
	sa, err := windows.Getsockname(s)
	if err != nil {
		t.Fatal(err)
	}
	return uint16(sa.(*windows.SockaddrInet4).Port)
}

// ownersSaid: whether the OS's tables say each socket's owner. Wine's
// iphlpapi gives every row PID 0 (wine_get_version is wine's own export);
// Windows gives the owner.
func ownersSaid() bool {
	return windows.NewLazySystemDLL("ntdll.dll").NewProc("wine_get_version").Find() != nil
}
