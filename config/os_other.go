//go:build !windows

package config

import "runtime"

// Elsewhere: containerd's socket, and this OS's rules in Validate.
const (
	defaultContainerdAddress = "/run/containerd/containerd.sock"
	thisOS                   = runtime.GOOS
)
