package nodefs

import (
	"cmp"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/test/testfs"
)

// acl is a POSIX access ACL as Linux stores it: version 2, then (tag,
// perm, id) entries, in the order the kernel takes (by tag, then id).
func acl(entries ...[3]uint32) []byte {
	slices.SortFunc(entries, func(a, b [3]uint32) int { return cmp.Or(cmp.Compare(a[0], b[0]), cmp.Compare(a[2], b[2])) })
	b := binary.LittleEndian.AppendUint32(nil, aclVersion)
	for _, e := range entries {
		b = binary.LittleEndian.AppendUint16(b, uint16(e[0]))
		b = binary.LittleEndian.AppendUint16(b, uint16(e[1]))
		b = binary.LittleEndian.AppendUint32(b, e[2])
	}
	return b
}

const (
	aclUserObj  = 0x01
	aclGroupObj = 0x04
	aclOther    = 0x20
	noID        = 0xffffffff
)

// Issue 54: on Linux the check reads POSIX ACLs: a root-owned file of mode
// 0644 whose ACL lets user 65534 write it was passed and that user
// appended to it. A named user or group entry that may write (within the
// mask) is refused naming it, one that may read makes a secret readable;
// root's, self's, and what the mask takes away are not.
func TestPOSIXACLsAreRead(t *testing.T) {
	base := [][3]uint32{{aclUserObj, 6, noID}, {aclGroupObj, 4, noID}, {aclOther, 4, noID}}
	with := func(extra ...[3]uint32) []byte { return acl(append(append([][3]uint32{}, base...), extra...)...) }
	for _, tc := range []struct {
		name   string
		xattr  []byte
		kind   Kind
		writes string // who may write ("" none)
		reads  string // who may read ("" none)
	}{
		{"none", nil, File, "", ""},
		{"a named user may write", with([3]uint32{aclUser, 6, 65534}, [3]uint32{aclMask, 6, noID}), File, "uid 65534, POSIX ACL", "uid 65534"},
		{"the mask takes the write away", with([3]uint32{aclUser, 6, 65534}, [3]uint32{aclMask, 4, noID}), File, "", "uid 65534"},
		{"a named group may write a folder", with([3]uint32{aclGroup, 7, 1001}, [3]uint32{aclMask, 7, noID}), Dir, "gid 1001, POSIX ACL", "gid 1001"},
		{"root and self", with([3]uint32{aclUser, 6, 0}, [3]uint32{aclUser, 6, 4242}, [3]uint32{aclGroup, 6, 0}, [3]uint32{aclMask, 6, noID}), File, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, r, err := ACLGrants(tc.xattr, 4242, tc.kind)
			if err != nil {
				t.Fatal(err)
			}
			var writes []string
			for _, x := range g {
				writes = append(writes, x.Who)
			}
			if w := strings.Join(writes, ", "); (tc.writes == "") != (w == "") || !strings.Contains(w, tc.writes) {
				t.Errorf("writers %q, want %q", w, tc.writes)
			}
			if rd := strings.Join(r, ", "); (tc.reads == "") != (rd == "") || !strings.Contains(rd, tc.reads) {
				t.Errorf("readers %q, want %q", rd, tc.reads)
			}
		})
	}
	if _, _, err := ACLGrants([]byte{1, 2, 3}, 0, File); err == nil {
		t.Error("a malformed ACL read as none")
	}

	// the file system's own ACL, read by Check and CheckSecret
	dir := filepath.Join(testfs.TempDir(t), "etc")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Mkdir(dir, 0o700))
	cfg := filepath.Join(dir, "config.toml")
	must(os.WriteFile(cfg, []byte("[plugin]\n"), 0o600))
	if err := Check(cfg); err != nil {
		t.Fatalf("a private file: %v", err)
	}
	if err := unix.Setxattr(cfg, "system.posix_acl_access", with([3]uint32{aclUser, 6, 65534}, [3]uint32{aclMask, 6, noID}), 0); err != nil {
		t.Fatalf("setting a POSIX ACL (the test's file system must take them): %v", err)
	}
	var we *WritableError
	if err := Check(cfg); !errors.As(err, &we) || !strings.Contains(err.Error(), "uid 65534, POSIX ACL") {
		t.Fatalf("a file a POSIX ACL lets user 65534 write: %v, want refused naming it", err)
	}
	var re *ReadableError
	must(unix.Setxattr(cfg, "system.posix_acl_access", with([3]uint32{aclUser, 4, 65534}, [3]uint32{aclMask, 4, noID}), 0))
	if err := CheckSecret(cfg); !errors.As(err, &re) || !strings.Contains(err.Error(), "uid 65534") {
		t.Fatalf("a secret a POSIX ACL lets user 65534 read: %v, want refused naming it", err)
	}
}
