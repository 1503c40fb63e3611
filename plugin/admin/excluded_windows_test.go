package admin

import (
	"errors"
	"net"
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/windows"
)

// Issue 53: a bind Windows forbids (WSAEACCES: the port is in an excluded
// range) while no program holds the port is told as that, naming the port
// and netsh's command, not as a port another program holds; a port in use
// (WSAEADDRINUSE) stays what it is.
func TestAForbiddenBindSaysWhereToLook(t *testing.T) {
	bind := func(errno windows.Errno) error {
		return &net.OpError{Op: "listen", Net: "tcp", Err: os.NewSyscallError("bind", errno)}
	}
	err := withHolder(bind(windows.WSAEACCES), "127.0.0.1:1")
	if !errors.Is(err, ErrPortForbidden) || !errors.Is(err, windows.WSAEACCES) || !strings.Contains(err.Error(), "port 1,") ||
		!strings.Contains(err.Error(), "netsh int ipv4 show excludedportrange") {
		t.Errorf("a forbidden bind: %v; want ErrPortForbidden naming the port and netsh", err)
	}
	if err := withHolder(bind(windows.WSAEADDRINUSE), "127.0.0.1:1"); errors.Is(err, ErrPortForbidden) {
		t.Errorf("a port in use: %v; want it not taken for a forbidden one", err)
	}
}
