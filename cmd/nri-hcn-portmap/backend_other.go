//go:build !windows

package main

import (
	"github.com/nri-hcn-portmap/nri-hcn-portmap/config"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn/hcnsim"
)

// newService is the HCN backend the configuration names: HNS (only on
// Windows; elsewhere an error that says so) or the simulator.
func newService(cfg config.HCN) (hcn.Service, error) {
	switch cfg.Backend {
	case config.BackendSimulated:
		return hcnsim.NewClient(cfg.SimulatorAddress)
	default:
		return hcn.NewWindowsService()
	}
}
