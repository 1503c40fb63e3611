package main

import (
	"github.com/nri-hcn-portmap/nri-hcn-portmap/config"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
)

// newService is HNS through hcsshim: the only backend of the Windows build
// (config validation rejects the simulated one there).
func newService(config.HCN) (hcn.Service, error) { return hcn.NewWindowsService() }
