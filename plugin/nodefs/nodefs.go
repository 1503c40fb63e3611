// Package nodefs keeps the node's files the plugin trusts (its
// configuration file, its executable, its log and socket folders) to the
// node's administrators: a folder it makes is theirs alone (SYSTEM and
// Administrators on Windows, as containerd's folders are; root on Linux),
// and a file another principal may change, replace or re-point is refused,
// naming the object and the principal.
//
// The question is always the same one: can someone else change what the
// plugin reads at this path? The path is resolved one component at a
// time from the root, never following a link unjudged, and each object on
// the way is asked only what matters for it:
//
//   - the file itself (and every link on the way to it): may anyone else
//     write it, delete or rename it, or change its permissions or owner;
//   - every folder on the way: may anyone else delete or rename it, delete
//     or rename what it holds (which replaces or re-points an entry), or
//     change its permissions or owner;
//   - adding files or folders to a folder changes no entry already in it:
//     it matters only for a file that does not exist yet (a log file, a
//     socket), and then only in the folder that will hold it.
//
// So a file under kubelet's folders, which inherit C:\'s default DACL
// (BUILTIN\Users may add files and folders, nothing more), passes, and a
// file in a folder where Users may delete entries does not. The decision
// is portable (Rights, Entry, the walk); what each OS says is read by an
// FS: on Windows the object's security descriptor as SDDL (Grants), on
// Linux its owner and mode (ModeGrants).
package nodefs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
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

// Rights are what a principal may do to one object, in the terms the
// check asks about (each OS's rights map onto these: Grants, ModeGrants).
type Rights uint8

// The rights the check weighs.
const (
	// RightWrite: change the content of a file, or re-point a link.
	RightWrite Rights = 1 << iota
	// RightDelete: delete or rename the object itself.
	RightDelete
	// RightPerms: change its permissions or its owner (an owner may).
	RightPerms
	// RightAdd: add files or folders to a folder.
	RightAdd
	// RightDeleteChild: delete or rename what a folder holds.
	RightDeleteChild
)

// String says what the rights let a principal do, in words.
func (r Rights) String() string {
	var out []string
	for _, w := range []struct {
		r    Rights
		says string
	}{{RightWrite, "write it"}, {RightDelete, "delete or rename it"}, {RightPerms, "change its permissions"},
		{RightAdd, "add files to it"}, {RightDeleteChild, "delete or rename what it holds"}} {
		if r&w.r != 0 {
			out = append(out, w.says)
		}
	}
	return strings.Join(out, ", ")
}

// Kind is what an object is.
type Kind int

// Kinds of objects.
const (
	Missing Kind = iota
	File
	Dir
	Link // a symbolic link (or, on Windows, a junction): read, never followed unjudged
)

// Grant is one principal other than the trusted ones and what it may do.
type Grant struct {
	Who    string // as an operator reads it: BUILTIN\Users (S-1-5-32-545), user alice (uid 1000)
	Rights Rights
}

// Entry is one object as an FS reads it, without following a link: what
// it is, a link's target as written, and who besides SYSTEM,
// Administrators, TrustedInstaller, root and the plugin's own account may
// do what to it.
type Entry struct {
	Kind   Kind
	Target string
	Grants []Grant
	// Readers are who else may read the object's content, as an operator
	// reads them (for CheckSecret).
	Readers []string
}

// FS reads the objects on a path. The OS's is the default; a test gives
// one that models a node's folders.
type FS interface {
	Lstat(path string) (Entry, error)
}

// OSFS is the operating system's FS.
func OSFS() FS { return osFS{} }

// Checker judges paths on an FS.
type Checker struct{ FS FS }

// Check refuses path, a file the plugin reads (or, when missing, creates),
// when a principal other than the node's administrators or the plugin's
// own account may change it, replace or re-point it or a folder on its
// way, or, while it is missing, plant it.
func Check(path string) error { return Checker{FS: osFS{}}.Check(path) }

// CheckFolder refuses dir, a folder the plugin makes files in (its log,
// its socket), when a principal other than the node's administrators or
// the plugin's own account may add to it, change what it holds, or
// replace a folder on its way; a dir that is itself a link is refused
// (the plugin serves and writes in the folder it made, not wherever a
// link points later).
func CheckFolder(dir string) error { return Checker{FS: osFS{}}.CheckFolder(dir) }

// CheckSecret refuses path, a file only the node's administrators may
// read (the admin key: whoever reads it may answer for the plugin), as
// Check does, and also when a principal other than them or the plugin's
// own account may read it (ErrReadable).
func CheckSecret(path string) error { return Checker{FS: osFS{}}.CheckSecret(path) }

// ErrReadable: a file only the node's administrators may read may be read
// by others.
var ErrReadable = errors.New("may be read by others than the node's administrators")

// ReadableError names the secret and who else may read it.
type ReadableError struct {
	Path       string
	Principals []string
	Fix        string
}

func (e *ReadableError) Error() string {
	return fmt.Sprintf("%s %s: %s; %s", e.Path, ErrReadable, strings.Join(e.Principals, ", "), e.Fix)
}

func (e *ReadableError) Unwrap() error { return ErrReadable }

// CheckSecret is the package's CheckSecret on c's FS.
func (c Checker) CheckSecret(path string) error {
	if err := c.Check(path); err != nil {
		return err
	}
	e, err := c.FS.Lstat(path)
	if err != nil {
		return fmt.Errorf("%s: who may read it: %w", path, err)
	}
	if e.Kind != File {
		return fmt.Errorf("%s: not a file", path)
	}
	if len(e.Readers) > 0 {
		return &ReadableError{Path: path, Principals: e.Readers, Fix: secretFix(path)}
	}
	return nil
}

// Check is the package's Check on c's FS.
func (c Checker) Check(path string) error { return c.walk(path, false) }

// CheckFolder is the package's CheckFolder on c's FS.
func (c Checker) CheckFolder(dir string) error { return c.walk(dir, true) }

// maxLinks bounds the links one path may pass through (Linux's ELOOP).
const maxLinks = 40

// The rights that matter for each role an object plays on a path.
const (
	onTheWay   = RightDelete | RightPerms | RightDeleteChild // a folder passed through
	theFile    = RightWrite | RightDelete | RightPerms       // the file read, or a link passed through
	makesFiles = onTheWay | RightAdd                         // a folder the plugin makes files in
)

// walk resolves path from its root, one component at a time, judging each
// object as the role it plays (folder: path is a folder the plugin makes
// files in). ".." is resolved where the OS resolves it: from the folder
// reached, links already followed.
func (c Checker) walk(path string, folder bool) error {
	abs := path
	if !filepath.IsAbs(abs) {
		wd, err := os.Getwd()
		if err != nil {
			return err
		}
		abs = wd + string(filepath.Separator) + path
	}
	rest := components(abs)
	cur := root(abs)
	if err := c.judge(cur, onTheWay); err != nil {
		return err
	}
	for links := 0; len(rest) > 0; {
		if rest[0] == ".." {
			cur, rest = filepath.Dir(cur), rest[1:]
			continue
		}
		next := filepath.Join(cur, rest[0])
		last := len(rest) == 1
		e, err := c.FS.Lstat(next)
		if err != nil {
			return fmt.Errorf("%s: who may change it: %w", next, err)
		}
		switch e.Kind {
		case Missing:
			if !last || folder {
				return fmt.Errorf("%s: %w", next, os.ErrNotExist)
			}
			// not made yet: whoever may add to its folder may plant it
			return c.judge(cur, makesFiles)
		case Link:
			if last && folder {
				return fmt.Errorf("%s is a link to %s: the plugin makes files only in a folder of its own, never through a link (a link may be re-pointed later)", next, e.Target)
			}
			if err := c.judgeEntry(next, e, theFile); err != nil {
				return err
			}
			if links++; links > maxLinks {
				return fmt.Errorf("%s: more than %d links", abs, maxLinks)
			}
			target := e.Target
			if !filepath.IsAbs(target) && filepath.VolumeName(target) == "" {
				target = cur + string(filepath.Separator) + target
			}
			// the link's target, then what followed the link on the path
			rest = append(components(target), rest[1:]...)
			cur = root(target)
			if err := c.judge(cur, onTheWay); err != nil {
				return err
			}
			continue
		case File:
			if !last || folder {
				return fmt.Errorf("%s: not a folder", next)
			}
			return c.judgeEntry(next, e, theFile)
		case Dir:
			role := onTheWay
			if last && folder {
				role = makesFiles
			}
			if err := c.judgeEntry(next, e, role); err != nil {
				return err
			}
			if last && !folder {
				return fmt.Errorf("%s: a folder, not a file", next)
			}
		}
		cur, rest = next, rest[1:]
	}
	return nil
}

// judge reads and judges one object.
func (c Checker) judge(path string, role Rights) error {
	e, err := c.FS.Lstat(path)
	if err != nil {
		return fmt.Errorf("%s: who may change it: %w", path, err)
	}
	return c.judgeEntry(path, e, role)
}

// judgeEntry refuses e when a grant holds one of the rights that matter
// for its role.
func (c Checker) judgeEntry(path string, e Entry, role Rights) error {
	var who []string
	for _, g := range e.Grants {
		if r := g.Rights & role; r != 0 {
			s := g.Who + " (may " + r.String() + ")"
			if !slices.Contains(who, s) {
				who = append(who, s)
			}
		}
	}
	if len(who) == 0 {
		return nil
	}
	return &WritableError{Path: path, Principals: who, Fix: fixFor(path, e.Kind == Link)}
}

// root is the root of an absolute path: / on Linux, C:\ or \\server\share\
// on Windows.
func root(abs string) string {
	return filepath.VolumeName(abs) + string(filepath.Separator)
}

// components are an absolute path's names below its root, as written
// ("." dropped, ".." kept for the walk to resolve).
func components(abs string) []string {
	rel := strings.TrimPrefix(abs, filepath.VolumeName(abs))
	var out []string
	for _, c := range strings.FieldsFunc(rel, func(r rune) bool { return os.IsPathSeparator(uint8(r)) }) {
		if c != "." {
			out = append(out, c)
		}
	}
	return out
}

// MkdirPrivate makes the folder path (and what is missing above it) for
// the node's administrators alone: on Windows with a protected DACL
// granting SYSTEM and Administrators full control, on Linux mode 0700. A
// folder that exists is left as it is (CheckFolder judges it).
func MkdirPrivate(path string) error { return mkdirPrivate(path) }

// MakePrivate makes the folder path the node administrators' alone,
// whether or not it exists: a missing one is made as MkdirPrivate makes
// it; one that exists is given to them (on Windows owner Administrators
// and PrivateSDDL's protected DACL, which Windows hands on to what it
// holds by inheritance; on Linux owner this account, mode 0700). For an
// installer, which an administrator runs on the folder they named: the
// running plugin never changes a folder it did not make, it refuses it
// (CheckFolder).
func MakePrivate(path string) error {
	if _, err := os.Lstat(path); errors.Is(err, os.ErrNotExist) {
		return mkdirPrivate(path)
	}
	return setPrivate(path)
}

// WriteSecret writes data to a new file at path that only the node's
// administrators may read or change (on Windows PrivateFileSDDL, given at
// creation; on Linux mode 0600): whatever was at path, with whatever
// permissions, is removed first, so no one who could read it before may
// read what is written now.
func WriteSecret(path string, data []byte) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	f, err := createSecret(path)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// PrivateFileSDDL is the security descriptor of a file WriteSecret makes on
// Windows: SYSTEM and Administrators alone, nothing inherited.
const PrivateFileSDDL = "D:P(A;;FA;;;BA)(A;;FA;;;SY)"

// PrivateSDDL is the security descriptor of a folder MkdirPrivate makes on
// Windows: containerd's SddlAdministratorsLocalSystem, inherited by what is
// created in it.
const PrivateSDDL = "D:P(A;OICI;GA;;;BA)(A;OICI;GA;;;SY)"
