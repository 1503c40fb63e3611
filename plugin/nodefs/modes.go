package nodefs

import (
	"fmt"
	"os"
	"os/user"
	"strconv"
)

// ModeGrants is the Linux reading of an object of kind k owned by uid and
// gid with mode: who besides root and self (the plugin's uid) may do what
// to it. An owner may change its permissions (and, in a sticky folder,
// delete or rename it). Group (other than root's) or other write on a
// file lets them write it; on a folder it lets them add entries and, unless
// the folder is sticky, delete or rename what it holds (in a sticky folder
// only their own, which the owner check of each entry covers). A link's
// own mode means nothing on Linux: whoever may change its folder may
// re-point it.
func ModeGrants(uid, gid uint32, mode os.FileMode, self uint32, k Kind) []Grant {
	var out []Grant
	if uid != 0 && uid != self {
		out = append(out, Grant{Who: fmt.Sprintf("user %s (uid %d, its owner)", userName(uid), uid), Rights: RightPerms})
	}
	if k == Link {
		return out
	}
	write := Rights(RightWrite)
	if k == Dir {
		write = RightAdd
		if mode&os.ModeSticky == 0 {
			write |= RightDeleteChild
		}
	}
	if mode.Perm()&0o020 != 0 && gid != 0 {
		out = append(out, Grant{Who: fmt.Sprintf("group %s (gid %d, mode %s)", groupName(gid), gid, modeString(mode)), Rights: write})
	}
	if mode.Perm()&0o002 != 0 {
		out = append(out, Grant{Who: fmt.Sprintf("every user (mode %s)", modeString(mode)), Rights: write})
	}
	return out
}

// ModeReaders is the Linux reading of who besides root and self may read
// a file owned by uid and gid with mode: an owner (it may chmod), a group
// other than root's with group read, everyone with other read.
func ModeReaders(uid, gid uint32, mode os.FileMode, self uint32) []string {
	var out []string
	if uid != 0 && uid != self {
		out = append(out, fmt.Sprintf("user %s (uid %d, its owner)", userName(uid), uid))
	}
	if mode.Perm()&0o040 != 0 && gid != 0 {
		out = append(out, fmt.Sprintf("group %s (gid %d, mode %s)", groupName(gid), gid, modeString(mode)))
	}
	if mode.Perm()&0o004 != 0 {
		out = append(out, fmt.Sprintf("every user (mode %s)", modeString(mode)))
	}
	return out
}

// modeString is the mode as chmod takes it: 0666, 1777 (sticky).
func modeString(m os.FileMode) string {
	n := uint32(m.Perm())
	if m&os.ModeSticky != 0 {
		n |= 0o1000
	}
	return fmt.Sprintf("%04o", n)
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
