package main

import (
	"github.com/nri-hcn-portmap/nri-hcn-portmap/config"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
)

// newService is HNS through hcsshim, at most hcn.max_concurrent_calls calls
// at a time: the only backend of the Windows build (config validation
// rejects the simulated one there).
func newService(cfg config.HCN) (hcn.Service, error) {
	return hcn.NewWindowsService(hcn.NewLimiter(cfg.MaxConcurrentCalls))
}
