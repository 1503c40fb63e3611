package admin

import (
	"fmt"

	"golang.org/x/sys/windows"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/hostsockets"
)

// trustedPeer: a process running as SYSTEM (a service's, as ncproxy's), or
// with the Administrators group enabled in its token (elevated).
func trustedPeer(p hostsockets.Peer) error {
	h, err := windows.OpenProcess(windows.PROCESS_QUERY_LIMITED_INFORMATION, false, p.PID)
	if err != nil {
		return fmt.Errorf("%w: PID %d cannot be opened: %w", ErrNotTrusted, p.PID, err)
	}
	defer windows.CloseHandle(h)
	var tok windows.Token
	if err := windows.OpenProcessToken(h, windows.TOKEN_QUERY, &tok); err != nil {
		return fmt.Errorf("%w: PID %d: its token: %w", ErrNotTrusted, p.PID, err)
	}
	defer tok.Close()
	u, err := tok.GetTokenUser()
	if err != nil {
		return fmt.Errorf("%w: PID %d: its user: %w", ErrNotTrusted, p.PID, err)
	}
	if u.User.Sid.IsWellKnown(windows.WinLocalSystemSid) {
		return nil
	}
	groups, err := tok.GetTokenGroups()
	if err != nil {
		return fmt.Errorf("%w: PID %d: its groups: %w", ErrNotTrusted, p.PID, err)
	}
	for _, g := range groups.AllGroups() {
		if g.Sid.IsWellKnown(windows.WinBuiltinAdministratorsSid) && g.Attributes&windows.SE_GROUP_ENABLED != 0 {
			return nil
		}
	}
	return fmt.Errorf("%w: PID %d runs as %s, neither SYSTEM nor an elevated administrator", ErrNotTrusted, p.PID, u.User.Sid)
}
