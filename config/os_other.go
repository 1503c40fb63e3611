//go:build !windows

package config

import "runtime"

// DefaultPath is where the configuration file is looked for when --config
// is not given: /etc/nri-hcn-portmap/config.toml.
func DefaultPath() string { return "/etc/nri-hcn-portmap/config.toml" }

// Elsewhere: containerd's socket, and this OS's rules in Validate.
const (
	defaultContainerdAddress = "/run/containerd/containerd.sock"
	defaultAdminSocket       = `/run/nri-hcn-portmap/admin.sock`
	defaultAdminKeyFile      = `/run/nri-hcn-portmap/admin.key`
	// DefaultContainerdConfig is containerd's configuration file (doctor
	// reads its runtime handlers)
	DefaultContainerdConfig = `/etc/containerd/config.toml`
	thisOS                  = runtime.GOOS
)
