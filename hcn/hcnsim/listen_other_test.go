//go:build !windows

package hcnsim

import (
	"path/filepath"
	"testing"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/test/testfs"
)

// testAddress is where a test serves the simulator: a unix socket, as the
// plugin and the demo reach it.
func testAddress(t *testing.T) string {
	return "unix://" + filepath.Join(testfs.TempDir(t), "s.sock")
}
