//go:build !windows

package main

import (
	"context"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/config"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn/hcnsim"
	"github.com/sirupsen/logrus"
)

// newService is the HCN backend the configuration names, at most
// hcn.max_concurrent_calls calls at a time: HNS (only on Windows; elsewhere
// an error that says so) or the simulator.
func newService(ctx context.Context, cfg config.HCN) (hcn.Service, error) {
	lim := hcn.NewLimiter(cfg.MaxConcurrentCalls)
	switch cfg.Backend {
	case config.BackendSimulated:
		sim, err := hcnsim.NewClient(cfg.SimulatorAddress)
		if err != nil {
			return nil, err
		}
		return hcn.Limited(sim, lim), nil
	default:
		return hcn.NewWindowsService(ctx, lim)
	}
}

// newNode is the HCN backend with the calls a node check needs, not
// capped (the doctor makes one call at a time).
func newNode(ctx context.Context, cfg config.HCN) (hcn.Node, error) {
	if cfg.Backend == config.BackendSimulated {
		return hcnsim.NewClient(cfg.SimulatorAddress)
	}
	return hcn.NewWindowsService(ctx, nil)
}

// onWindows: the plugin runs where HNS is.
const onWindows = false

// buildForOS wires the plugin as it runs here: no HNS will come (only the
// simulator), so a missing one is said at once.
func buildForOS(ctx context.Context, cfg config.Config, flags *config.Flags, log *logrus.Entry) (*app, error) {
	return build(ctx, cfg, flags, log, nil)
}
