package admin

import (
	"context"
	"fmt"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/hostsockets"
)

// heldBy says which process listens on a TCP port, as the OS says it
// (hostsockets: the tables of Windows' iphlpapi, Linux's /proc), "" when
// it does not say.
func heldBy(port uint16) string {
	socks, err := hostsockets.OS{}.On(context.Background(), []hostsockets.Port{{Protocol: hcn.TCP, Port: port}})
	if err != nil || len(socks) == 0 {
		return ""
	}
	s := socks[0]
	switch {
	case s.PID == 0 && s.Program == "":
		return ""
	case s.Program == "":
		return fmt.Sprintf("process %d", s.PID)
	}
	return fmt.Sprintf("process %d (%s)", s.PID, s.Program)
}
