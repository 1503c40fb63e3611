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

// DialPrivate connects to ListenPrivate's pipe, and hangs up on a pipe
// that is not the node's administrators' (owned by SYSTEM or
// Administrators): a program that created the pipe first is not the
// plugin.
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

// trustedServer checks the owner of the pipe c is connected to, read from
// c's own handle (GetSecurityInfo): the pipe's creator set it, and only
// SYSTEM or an elevated administrator can make it SYSTEM or
// Administrators.
func trustedServer(c net.Conn, path string) error {
	f, ok := c.(interface{ Fd() uintptr })
	if !ok {
		return fmt.Errorf("%w: %s: the pipe's owner cannot be asked", ErrCannotTell, path)
	}
	sd, err := windows.GetSecurityInfo(windows.Handle(f.Fd()), windows.SE_FILE_OBJECT, windows.OWNER_SECURITY_INFORMATION)
	if err != nil {
		return fmt.Errorf("%w: %s: its owner: %w", ErrCannotTell, path, err)
	}
	owner, _, err := sd.Owner()
	if err != nil || owner == nil {
		return fmt.Errorf("%w: %s: it names no owner (%v)", ErrCannotTell, path, err)
	}
	if !PipeOwnerTrusted(owner.String()) {
		return fmt.Errorf("%w: %s is owned by %s, neither SYSTEM nor Administrators: another program made it", ErrNotThePlugin, path, owner.String())
	}
	return nil
}
