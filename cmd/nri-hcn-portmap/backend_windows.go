package main

import (
	"context"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/config"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
)

// newService is HNS through hcsshim, at most hcn.max_concurrent_calls calls
// at a time: the only backend of the Windows build (config validation
// rejects the simulated one there).
func newService(ctx context.Context, cfg config.HCN) (hcn.Service, error) {
	return hcn.NewWindowsService(ctx, hcn.NewLimiter(cfg.MaxConcurrentCalls))
}

// newNode is HNS with the calls a node check needs, not capped (the
// doctor makes one call at a time).
func newNode(ctx context.Context, _ config.HCN) (hcn.Node, error) {
	return hcn.NewWindowsService(ctx, nil)
}
