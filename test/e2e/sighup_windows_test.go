//go:build windows

package e2e

import "errors"

func sighup(int) error { return errors.New("no SIGHUP on Windows: use `nri-hcn-portmap reload`") }
