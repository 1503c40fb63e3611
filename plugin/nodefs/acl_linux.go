package nodefs

import (
	"errors"

	"golang.org/x/sys/unix"
)

// posixACL reads the object's access ACL as Linux stores it (nil: none,
// or a file system without ACLs), not following a link.
func posixACL(path string) ([]byte, error) {
	buf := make([]byte, 256)
	for {
		n, err := unix.Lgetxattr(path, "system.posix_acl_access", buf)
		switch {
		case errors.Is(err, unix.ENODATA) || errors.Is(err, unix.ENOTSUP) || errors.Is(err, unix.EOPNOTSUPP):
			return nil, nil
		case errors.Is(err, unix.ERANGE):
			buf = make([]byte, 2*len(buf))
			continue
		case err != nil:
			return nil, err
		}
		return buf[:n], nil
	}
}
