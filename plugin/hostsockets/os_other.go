//go:build !windows && !linux

package hostsockets

import (
	"context"
	"fmt"
	"net/netip"
)

// OS reads the node's sockets: this OS is not read (no socket is seen).
type OS struct{ Probe bool }

// On reads nothing here.
func (OS) On(context.Context, []Port) ([]Socket, error) { return nil, nil }

// PeerOf: this OS's connections are not read.
func PeerOf(local, remote netip.AddrPort) (Peer, error) {
	return Peer{}, fmt.Errorf("%w: %s to %s: not read on this OS", ErrNoPeer, local, remote)
}
