//go:build windows && !sddlmodel

package nodefs

// security is the object's own owner and DACL, as SDDL.
func security(path string, _ Kind) (string, error) { return objectSecurity(path) }

// setPrivate gives the folder at path to the node's administrators.
func setPrivate(path string) error { return setObjectPrivate(path) }
