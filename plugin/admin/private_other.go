//go:build !windows

package admin

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/nodefs"
)

// ListenPrivate listens on the unix socket path for the node's
// administrators alone: its folder is made root's alone (0700) and checked,
// the socket is 0600, and a peer whose uid is neither root's nor the
// plugin's is hung up on (SO_PEERCRED), whatever the file's mode.
func ListenPrivate(path string) (net.Listener, error) {
	dir := filepath.Dir(path)
	if err := nodefs.MkdirPrivate(dir); err != nil {
		return nil, err
	}
	if err := nodefs.CheckFolder(dir); err != nil {
		return nil, err
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) { // a socket a stopped plugin left
		return nil, err
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(path, 0o600); err != nil {
		l.Close()
		return nil, err
	}
	return &peers{Listener: l, self: uint32(os.Getuid())}, nil
}

// DialPrivate connects to ListenPrivate's socket, and hangs up on a
// server that is not root's or the client's own user's (SO_PEERCRED): a
// program that made the socket first is not the plugin.
func DialPrivate(path string) (net.Conn, error) {
	c, err := net.Dial("unix", path)
	if err != nil {
		return nil, err
	}
	uid, err := peerUID(c)
	if err == nil && !PeerAllowed(uid, uint32(os.Getuid())) {
		err = fmt.Errorf("%w: %s is served by uid %d, neither root nor this user", ErrNotThePlugin, path, uid)
	}
	if err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// peers accepts only connections from root or the plugin's own user.
type peers struct {
	net.Listener
	self uint32
}

func (p *peers) Accept() (net.Conn, error) {
	for {
		c, err := p.Listener.Accept()
		if err != nil {
			return nil, err
		}
		uid, err := peerUID(c)
		if err == nil && PeerAllowed(uid, p.self) {
			return c, nil
		}
		c.Close() // not the node's administrators: hung up on
	}
}

// PeerAllowed is who may use the private channel on Linux: root and the
// plugin's own user.
func PeerAllowed(uid, self uint32) bool { return uid == 0 || uid == self }

func peerUID(c net.Conn) (uint32, error) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return 0, fmt.Errorf("not a unix socket")
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return 0, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) { cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) }); err != nil {
		return 0, err
	}
	if cerr != nil {
		return 0, cerr
	}
	return cred.Uid, nil
}
