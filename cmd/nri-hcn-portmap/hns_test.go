package main

import (
	"github.com/nri-hcn-portmap/nri-hcn-portmap/config"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
)

// testHNS is the HNS a command's test runs against (newTestHNS: the
// simulator over TCP here, hns_other_test.go; on Windows the windows
// backend, which under wine reaches the HNS emulator, hns_windows_test.go).
// svc seeds it and reads it back; flags and use point a command or a
// configuration at it.
type testHNS struct {
	svc   hcn.Service
	flags []string
	use   func(*config.HCN)
}
