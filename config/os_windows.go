package config

// On Windows: containerd's named pipe, and this OS's rules in Validate.
const (
	defaultContainerdAddress = `\\.\pipe\containerd-containerd`
	thisOS                   = "windows"
)
