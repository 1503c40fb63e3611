//go:build !windows

package nodefs

import (
	"fmt"
	"os"
	"os/user"
	"strconv"
	"syscall"
)

// writers judges the file's owner and mode: root and the plugin's own
// user may change it; another owner, a group or everyone with write
// permission may too, and are named.
func writers(path string) ([]string, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return nil, fmt.Errorf("no owner known")
	}
	return Modes(st.Uid, st.Gid, fi.Mode(), uint32(os.Getuid())), nil
}

// Modes is the Linux decision: who besides root and self (the plugin's
// uid) may change an object owned by uid and gid with mode. A sticky
// folder's others may add files but not replace another's: it is still
// refused (a missing file could be planted).
func Modes(uid, gid uint32, mode os.FileMode, self uint32) []string {
	var who []string
	if uid != 0 && uid != self {
		who = append(who, fmt.Sprintf("user %s (uid %d, its owner)", userName(uid), uid))
	}
	if mode.Perm()&0o020 != 0 && gid != 0 {
		who = append(who, fmt.Sprintf("group %s (gid %d, mode %04o)", groupName(gid), gid, mode.Perm()))
	}
	if mode.Perm()&0o002 != 0 {
		who = append(who, fmt.Sprintf("every user (mode %04o)", mode.Perm()))
	}
	return who
}

func userName(uid uint32) string {
	if u, err := user.LookupId(strconv.Itoa(int(uid))); err == nil {
		return u.Username
	}
	return strconv.Itoa(int(uid))
}

func groupName(gid uint32) string {
	if g, err := user.LookupGroupId(strconv.Itoa(int(gid))); err == nil {
		return g.Name
	}
	return strconv.Itoa(int(gid))
}

func mkdirPrivate(path string) error { return os.MkdirAll(path, 0o700) }

func fixFor(path string) string {
	return fmt.Sprintf("give it to root alone: chown root:root %q && chmod go-w %q", path, path)
}
