package main

import (
	"context"
	"testing"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/config"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
)

// newTestHNS is the HNS a command's test runs against: on Windows the
// windows backend, which under wine reaches the HNS emulator (make
// test-windows) and on a Windows host HNS itself, shared with every other
// test (hns_other_test.go: a simulator of the test's own).
func newTestHNS(t *testing.T) testHNS {
	t.Helper()
	svc, err := hcn.NewWindowsService(context.Background(), hcn.NewLimiter(4))
	if err != nil {
		t.Fatal(err)
	}
	return testHNS{svc: svc, use: func(c *config.HCN) { c.Backend = config.BackendWindows }}
}
