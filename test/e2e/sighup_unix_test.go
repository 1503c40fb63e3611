//go:build !windows

package e2e

import "syscall"

func sighup(pid int) error { return syscall.Kill(pid, syscall.SIGHUP) }
