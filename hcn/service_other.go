//go:build !windows

package hcn

import (
	"fmt"
	"runtime"
)

// NewWindowsService fails off Windows: the real HNS only exists there.
func NewWindowsService(*Limiter) (Service, error) {
	return nil, fmt.Errorf("the windows HCN backend is not available on %s (HNS exists only on Windows); use the simulated backend: %w",
		runtime.GOOS, ErrUnavailable)
}
