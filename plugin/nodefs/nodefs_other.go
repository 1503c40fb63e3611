//go:build !windows

package nodefs

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// osFS reads the objects on a path with lstat: never following a link,
// whose target it reads.
type osFS struct{}

func (osFS) Lstat(path string) (Entry, error) {
	fi, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return Entry{Kind: Missing}, nil
	}
	if err != nil {
		return Entry{}, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return Entry{}, fmt.Errorf("no owner known")
	}
	e := Entry{Kind: File}
	switch {
	case fi.Mode()&os.ModeSymlink != 0:
		e.Kind = Link
		if e.Target, err = os.Readlink(path); err != nil {
			return Entry{}, err
		}
	case fi.IsDir():
		e.Kind = Dir
	}
	e.Grants = ModeGrants(st.Uid, st.Gid, fi.Mode(), uint32(os.Getuid()), e.Kind)
	e.Readers = ModeReaders(st.Uid, st.Gid, fi.Mode(), uint32(os.Getuid()))
	if e.Kind != Link { // a link's ACL is not used
		acl, err := posixACL(path)
		if err != nil {
			return Entry{}, fmt.Errorf("%s: its POSIX ACL: %w", path, err)
		}
		g, r, err := ACLGrants(acl, uint32(os.Getuid()), e.Kind)
		if err != nil {
			return Entry{}, fmt.Errorf("%s: %w", path, err)
		}
		e.Grants, e.Readers = append(e.Grants, g...), append(e.Readers, r...)
	}
	return e, nil
}

func mkdirPrivate(path string) error { return os.MkdirAll(path, 0o700) }

// setPrivate changes the folder itself, through a descriptor opened
// without following a link (O_NOFOLLOW): a link swapped in after the
// caller's check is refused, not followed.
func setPrivate(path string) error {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Chown(os.Geteuid(), os.Getegid()); err != nil {
		return err
	}
	return f.Chmod(0o700)
}

func createSecret(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
}

func secretFix(path string) string {
	return fmt.Sprintf("give it to root alone: chown root:root %q && chmod 600 %q (a restarted plugin writes a new one so)", path, path)
}

func fixFor(path string, link bool) string {
	if link { // a link's own owner (its mode is not used)
		return fmt.Sprintf("give it to root alone: chown -h root:root %q", path)
	}
	return fmt.Sprintf("give it to root alone: chown root:root %q && chmod go-w %q (and, where its POSIX ACL names others, setfacl -b %q)", path, path, path)
}
