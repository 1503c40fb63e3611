//go:build !windows

package hcn

import (
	"context"
	"fmt"
	"runtime"
)

// NewWindowsService fails off Windows: the real HNS only exists there.
func NewWindowsService(context.Context, *Limiter) (Node, error) {
	return nil, fmt.Errorf("the windows HCN backend is not available on %s (HNS exists only on Windows); to run against the HNS "+
		"simulator, start it (nri-hcn-portmap simulator --listen unix:///tmp/hcnsim.sock) and pass --hcn-backend simulated "+
		"--hcn-simulator unix:///tmp/hcnsim.sock: %w", runtime.GOOS, ErrUnavailable)
}
