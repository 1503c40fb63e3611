//go:build !windows

package main

import (
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/config"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn/hcnsim"
)

// newTestHNS is the HNS a command's test runs against: here the simulator,
// served over TCP (hns_windows_test.go: the HNS emulator the Windows suite
// runs under wine). svc seeds it and reads it back; flags and use point a
// command or a configuration at it.
func newTestHNS(t *testing.T) testHNS {
	t.Helper()
	sim := hcnsim.New()
	srv := httptest.NewServer(hcnsim.Handler(sim))
	t.Cleanup(srv.Close)
	addr := "tcp://" + strings.TrimPrefix(srv.URL, "http://")
	return testHNS{svc: sim, flags: []string{"--hcn-backend", "simulated", "--hcn-simulator", addr},
		use: func(c *config.HCN) { c.Backend, c.SimulatorAddress = config.BackendSimulated, addr }}
}
