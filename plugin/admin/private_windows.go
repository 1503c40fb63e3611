package admin

import (
	"context"
	"fmt"
	"net"

	"golang.org/x/sys/windows"

	"github.com/Microsoft/go-winio"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/config"
)

// ListenPrivate listens on the named pipe path for the node's
// administrators alone (its DACL, PrivatePipeSDDL).
func ListenPrivate(path string) (net.Listener, error) {
	return winio.ListenPipe(path, &winio.PipeConfig{SecurityDescriptor: PrivatePipeSDDL})
}

// DialPrivate connects to ListenPrivate's pipe, and hangs up on a server
// that is not the node's administrators' (its process runs as SYSTEM, or
// as an elevated administrator): a program that created the pipe first is
// not the plugin.
func DialPrivate(path string) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), config.AdminClientTimeout)
	defer cancel()
	c, err := winio.DialPipeContext(ctx, path)
	if err != nil {
		return nil, err
	}
	if err := trustedServer(c, path); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// trustedServer checks the process serving the pipe c:
// GetNamedPipeServerProcessId, then its token.
func trustedServer(c net.Conn, path string) error {
	f, ok := c.(interface{ Fd() uintptr })
	if !ok {
		return fmt.Errorf("%w: %s: the pipe's server cannot be asked", ErrCannotTell, path)
	}
	var pid uint32
	if err := windows.GetNamedPipeServerProcessId(windows.Handle(f.Fd()), &pid); err != nil {
		return fmt.Errorf("%w: %s: its server process: %w", ErrCannotTell, path, err)
	}
	p, err := windows.OpenProcess(windows.PROCESS_QUERY_LIMITED_INFORMATION, false, pid)
	if err != nil {
		return fmt.Errorf("%w: %s: server process %d: %w", ErrCannotTell, path, pid, err)
	}
	defer windows.CloseHandle(p)
	var tok windows.Token
	if err := windows.OpenProcessToken(p, windows.TOKEN_QUERY, &tok); err != nil {
		return fmt.Errorf("%w: %s: server process %d's token: %w", ErrCannotTell, path, pid, err)
	}
	defer tok.Close()
	u, err := tok.GetTokenUser()
	if err != nil {
		return fmt.Errorf("%w: %s: server process %d's account: %w", ErrCannotTell, path, pid, err)
	}
	groups, err := tok.GetTokenGroups()
	if err != nil {
		return fmt.Errorf("%w: %s: server process %d's groups: %w", ErrCannotTell, path, pid, err)
	}
	admin := false
	for _, g := range groups.AllGroups() {
		admin = admin || (g.Sid.String() == "S-1-5-32-544" && g.Attributes&windows.SE_GROUP_ENABLED != 0)
	}
	if !ServerTrusted(u.User.Sid.String(), admin) {
		return fmt.Errorf("%w: %s is served by process %d, running as %s, neither SYSTEM nor an elevated administrator",
			ErrNotThePlugin, path, pid, u.User.Sid.String())
	}
	return nil
}
