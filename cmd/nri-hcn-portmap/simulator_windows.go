package main

import (
	"errors"
	"io"
)

// simulatorUsage: the Windows build has no simulator.
const simulatorUsage = ""

// simulatorCmd: the HNS simulator is a test double for Linux and is not
// built into the Windows binary.
func simulatorCmd([]string, io.Writer) error {
	return errors.New("simulator: the HNS simulator is a test double for Linux tests and demos; it is not part of the Windows build")
}
