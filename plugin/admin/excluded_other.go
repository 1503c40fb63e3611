//go:build !windows

package admin

import (
	"errors"
	"syscall"
)

// excludedBy says why a forbidden bind was refused: on Linux a port below
// net.ipv4.ip_unprivileged_port_start for a process without
// CAP_NET_BIND_SERVICE. "" for any other error.
func excludedBy(err error) string {
	if !errors.Is(err, syscall.EACCES) {
		return ""
	}
	return "sysctl net.ipv4.ip_unprivileged_port_start says which ports need CAP_NET_BIND_SERVICE"
}
