package nodefs

import (
	"encoding/binary"
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

// POSIX ACL entries as Linux stores them in system.posix_acl_access
// (include/uapi/linux/posix_acl_xattr.h): a version, then tag, perm and id.
const (
	aclVersion = 2
	aclUser    = 0x02
	aclGroup   = 0x08
	aclMask    = 0x10
	aclRead    = 4
	aclWrite   = 2
)

// ACLGrants is the Linux reading of an object's POSIX ACL, as the kernel
// stores it (xattr: system.posix_acl_access; none: nil): who besides root
// and self a named user or group entry lets write it (within the mask),
// and who it lets read it. The owner, owning group and other entries are
// the mode's, which ModeGrants reads.
func ACLGrants(xattr []byte, self uint32, k Kind) ([]Grant, []string, error) {
	if len(xattr) == 0 {
		return nil, nil, nil
	}
	if len(xattr) < 4 || (len(xattr)-4)%8 != 0 || binary.LittleEndian.Uint32(xattr) != aclVersion {
		return nil, nil, fmt.Errorf("a POSIX ACL of %d bytes not in version 2's form", len(xattr))
	}
	type entry struct {
		tag, perm uint16
		id        uint32
	}
	var entries []entry
	mask := uint16(aclRead | aclWrite)
	for b := xattr[4:]; len(b) > 0; b = b[8:] {
		e := entry{binary.LittleEndian.Uint16(b), binary.LittleEndian.Uint16(b[2:]), binary.LittleEndian.Uint32(b[4:])}
		if e.tag == aclMask {
			mask = e.perm
		}
		entries = append(entries, e)
	}
	write := Rights(RightWrite)
	if k == Dir {
		write = RightAdd | RightDeleteChild
	}
	var grants []Grant
	var readers []string
	for _, e := range entries {
		var who string
		switch {
		case e.tag == aclUser && e.id != 0 && e.id != self:
			who = fmt.Sprintf("user %s (uid %d, POSIX ACL)", userName(e.id), e.id)
		case e.tag == aclGroup && e.id != 0:
			who = fmt.Sprintf("group %s (gid %d, POSIX ACL)", groupName(e.id), e.id)
		default:
			continue
		}
		if e.perm&mask&aclWrite != 0 && k != Link {
			grants = append(grants, Grant{Who: who, Rights: write})
		}
		if e.perm&mask&aclRead != 0 {
			readers = append(readers, who)
		}
	}
	return grants, readers, nil
}
