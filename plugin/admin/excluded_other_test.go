//go:build !windows

package admin

import (
	"errors"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
)

// Issue 53: a bind the OS forbids while no program holds the port is told
// as that (ErrPortForbidden, naming the port and where to look), not as a
// port another program holds; a port in use stays what it is.
func TestAForbiddenBindSaysWhereToLook(t *testing.T) {
	bind := func(errno syscall.Errno) error {
		return &net.OpError{Op: "listen", Net: "tcp", Err: os.NewSyscallError("bind", errno)}
	}
	err := withHolder(bind(syscall.EACCES), "127.0.0.1:1")
	if !errors.Is(err, ErrPortForbidden) || !errors.Is(err, syscall.EACCES) || !strings.Contains(err.Error(), "port 1,") ||
		!strings.Contains(err.Error(), "ip_unprivileged_port_start") {
		t.Errorf("a forbidden bind: %v; want ErrPortForbidden naming the port and the sysctl", err)
	}
	if err := withHolder(bind(syscall.EADDRINUSE), "127.0.0.1:1"); errors.Is(err, ErrPortForbidden) {
		t.Errorf("a port in use: %v; want it not taken for a forbidden one", err)
	}
}
