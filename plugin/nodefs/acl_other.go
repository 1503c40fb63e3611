//go:build !linux && !windows

package nodefs

// posixACL: this OS's ACLs are not read.
func posixACL(string) ([]byte, error) { return nil, nil }
