package config

import (
	"cmp"
	"os"
	"path/filepath"
)

// DefaultPath is where the configuration file is looked for when --config
// is not given: in a HostProcess container (the chart's DaemonSet, and
// kubectl exec into it) the ConfigMap's file under the container's mount
// point, %CONTAINER_SANDBOX_MOUNT_POINT%\etc\nri-hcn-portmap\config.toml,
// which holds with and without the bind filter; elsewhere (the service)
// %ProgramData%\nri-hcn-portmap\config.toml.
func DefaultPath() string {
	if root := os.Getenv("CONTAINER_SANDBOX_MOUNT_POINT"); root != "" {
		return filepath.Join(root, "etc", "nri-hcn-portmap", "config.toml")
	}
	return filepath.Join(cmp.Or(os.Getenv("ProgramData"), `C:\ProgramData`), "nri-hcn-portmap", "config.toml")
}

// On Windows: containerd's named pipe, and this OS's rules in Validate.
const (
	defaultContainerdAddress = `\\.\pipe\containerd-containerd`
	defaultAdminSocket       = `\\.\pipe\nri-hcn-portmap`
	defaultAdminKeyFile      = `C:\ProgramData\nri-hcn-portmap\admin.key`
	// DefaultContainerdConfig is containerd's configuration file (doctor
	// reads its runtime handlers)
	DefaultContainerdConfig = `C:\Program Files\containerd\config.toml`
	thisOS                  = "windows"
)
