//go:build !windows && !linux

package hostsockets

import "context"

// OS reads the node's sockets: this OS is not read (no socket is seen).
type OS struct{ Probe bool }

// On reads nothing here.
func (OS) On(context.Context, []Port) ([]Socket, error) { return nil, nil }
