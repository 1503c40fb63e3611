package admin

import (
	"errors"

	"golang.org/x/sys/windows"
)

// excludedBy says where to see the range a forbidden bind fell in:
// Windows answers a bind inside an excluded port range with WSAEACCES
// ("forbidden by its access permissions"), not WSAEADDRINUSE (docker/for-win
// 3171), and lists the ranges with netsh. "" for any other error.
func excludedBy(err error) string {
	if !errors.Is(err, windows.WSAEACCES) {
		return ""
	}
	return "netsh int ipv4 show excludedportrange protocol=tcp lists the ranges Hyper-V, WinNAT and administrators exclude"
}
