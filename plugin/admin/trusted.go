package admin

import (
	"errors"
	"net"

	"github.com/sirupsen/logrus"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/hostsockets"
)

// ListenAdmins listens on addr, a loopback IP and port, for the node's
// administrators alone: a connection whose other end a process of anyone
// else holds (the node's own tables say whose: root's or the plugin's
// user on Linux, SYSTEM's or an elevated administrator's on Windows) is
// hung up on, and logged. For a service that speaks a protocol without
// authentication to programs of the node (ncproxy's gRPC).
func ListenAdmins(addr string, log *logrus.Entry) (net.Listener, error) {
	l, err := Listen(addr)
	if err != nil {
		return nil, err
	}
	return &admins{Listener: l, log: log}, nil
}

type admins struct {
	net.Listener
	log *logrus.Entry
}

func (a *admins) Accept() (net.Conn, error) {
	for {
		c, err := a.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if err := trusted(c); err != nil {
			a.log.WithError(err).WithField("peer", c.RemoteAddr().String()).Warn("connection refused: not the node's administrators")
			c.Close()
			continue
		}
		return c, nil
	}
}

// trusted checks who holds the other end of c.
func trusted(c net.Conn) error {
	local, lok := c.LocalAddr().(*net.TCPAddr)
	remote, rok := c.RemoteAddr().(*net.TCPAddr)
	if !lok || !rok {
		return ErrNotTrusted
	}
	// the peer's socket: its local end is our remote one
	p, err := hostsockets.PeerOf(remote.AddrPort(), local.AddrPort())
	if err != nil {
		return err
	}
	return trustedPeer(p)
}

// ErrNotTrusted: the other end of a connection is not the node's
// administrators'.
var ErrNotTrusted = errors.New("the peer is not the node's administrators'")
