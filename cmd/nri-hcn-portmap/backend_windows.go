package main

import (
	"context"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/config"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
	"github.com/sirupsen/logrus"
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

// onWindows: the plugin runs where HNS is.
const onWindows = true

// buildForOS wires the plugin as it runs here: HNS may be late at boot, so
// it is waited for.
func buildForOS(ctx context.Context, cfg config.Config, flags *config.Flags, log *logrus.Entry) (*app, error) {
	return buildRetrying(ctx, cfg, flags, log)
}
