//go:build !windows

package admin

import (
	"fmt"
	"os"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/hostsockets"
)

// trustedPeer: root or the plugin's own user, as on the private channel.
func trustedPeer(p hostsockets.Peer) error {
	if !PeerAllowed(p.UID, uint32(os.Getuid())) {
		return fmt.Errorf("%w: uid %d, neither root nor the plugin's user", ErrNotTrusted, p.UID)
	}
	return nil
}
