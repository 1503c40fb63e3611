// Package nodefs keeps the node's files the plugin trusts (its
// configuration file, its state and log folder) to the node's
// administrators: a folder it makes is theirs alone (SYSTEM and
// Administrators on Windows, as containerd's and kubelet's folders are;
// root on Linux), and a file or folder another principal may change is
// refused, naming it and the principal. The decision is portable: on
// Windows it reads the object's security descriptor as SDDL (Writers), on
// Linux its owner and mode.
package nodefs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// ErrWritable: a file or folder the plugin trusts may be changed by a
// principal other than the node's administrators (or the plugin's own
// account).
var ErrWritable = errors.New("may be changed by others than the node's administrators")

// WritableError names the file or folder and who may change it.
type WritableError struct {
	Path       string
	Principals []string
	Fix        string
}

func (e *WritableError) Error() string {
	return fmt.Sprintf("%s %s: %s; %s", e.Path, ErrWritable, strings.Join(e.Principals, ", "), e.Fix)
}

func (e *WritableError) Unwrap() error { return ErrWritable }

// Check refuses path, and the folder that holds it (whoever may write
// there may replace it, or plant it while it is missing), when a principal other than the node's
// administrators or the plugin's own account may change them.
func Check(path string) error {
	abs, err := filepath.Abs(path)
	if err != nil {
		return err
	}
	for _, p := range []string{abs, filepath.Dir(abs)} {
		if _, err := os.Stat(p); errors.Is(err, os.ErrNotExist) && p == abs {
			continue // not made yet (a log file): its folder decides
		}
		who, err := writers(p)
		if err != nil {
			return fmt.Errorf("%s: who may change it: %w", p, err)
		}
		if len(who) > 0 {
			return &WritableError{Path: p, Principals: who, Fix: fixFor(p)}
		}
	}
	return nil
}

// CheckFolder refuses the folder dir when a principal other than the
// node's administrators or the plugin's own account may change it (what
// is above it is not judged: a folder the plugin made in /tmp or /run is
// its own).
func CheckFolder(dir string) error {
	who, err := writers(dir)
	if err != nil {
		return fmt.Errorf("%s: who may change it: %w", dir, err)
	}
	if len(who) > 0 {
		return &WritableError{Path: dir, Principals: who, Fix: fixFor(dir)}
	}
	return nil
}

// MkdirPrivate makes the folder path (and what is missing above it) for
// the node's administrators alone: on Windows with a protected DACL
// granting SYSTEM and Administrators full control, on Linux mode 0700. A
// folder that exists is left as it is (Check judges it).
func MkdirPrivate(path string) error { return mkdirPrivate(path) }

// PrivateSDDL is the security descriptor of a folder MkdirPrivate makes on
// Windows: containerd's SddlAdministratorsLocalSystem, inherited by what is
// created in it.
const PrivateSDDL = "D:P(A;OICI;GA;;;BA)(A;OICI;GA;;;SY)"
