package admin

import (
	"context"
	"net"

	"github.com/Microsoft/go-winio"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/config"
)

// ListenPrivate listens on the named pipe path for the node's
// administrators alone (its DACL, PrivatePipeSDDL).
func ListenPrivate(path string) (net.Listener, error) {
	return winio.ListenPipe(path, &winio.PipeConfig{SecurityDescriptor: PrivatePipeSDDL})
}

// DialPrivate connects to ListenPrivate's pipe.
func DialPrivate(path string) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), config.AdminClientTimeout)
	defer cancel()
	return winio.DialPipeContext(ctx, path)
}
