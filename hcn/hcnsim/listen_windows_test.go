package hcnsim

import "testing"

// testAddress is where a test serves the simulator: loopback TCP, since
// wine 8 has no AF_UNIX sockets (socket(): WSAEAFNOSUPPORT, 10047), and
// the tests of this package run under wine (make test-windows).
func testAddress(*testing.T) string { return "tcp://127.0.0.1:0" }
