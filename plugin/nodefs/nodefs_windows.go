package nodefs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/windows"
)

// osFS reads the objects on a path without following a link: the kind
// and a link's target from Lstat and Readlink (a symbolic link, or a
// junction, which Go reports as irregular), the owner and DACL from a
// handle opened on the object itself (FILE_FLAG_OPEN_REPARSE_POINT), as
// SDDL (security; a test build may model it: security_model_windows.go).
type osFS struct{}

func (osFS) Lstat(path string) (Entry, error) {
	fi, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return Entry{Kind: Missing}, nil
	}
	if err != nil {
		return Entry{}, err
	}
	e := Entry{Kind: File}
	if fi.IsDir() {
		e.Kind = Dir
	}
	if fi.Mode()&(os.ModeSymlink|os.ModeIrregular) != 0 {
		t, err := os.Readlink(path)
		switch {
		case err == nil:
			e.Kind, e.Target = Link, t
		case fi.Mode()&os.ModeSymlink != 0:
			return Entry{}, err
		}
	}
	sddl, err := security(path, e.Kind)
	if err != nil {
		return Entry{}, err
	}
	if e.Grants, err = Grants(sddl, self(), e.Kind); err != nil {
		return Entry{}, err
	}
	if e.Readers, err = Readers(sddl, self()); err != nil {
		return Entry{}, err
	}
	return e, nil
}

// objectSecurity reads the owner and DACL of the object at path itself (a
// link's own, not its target's), as SDDL.
func objectSecurity(path string) (string, error) {
	p, err := windows.UTF16PtrFromString(path)
	if err != nil {
		return "", err
	}
	h, err := windows.CreateFile(p, windows.READ_CONTROL,
		windows.FILE_SHARE_READ|windows.FILE_SHARE_WRITE|windows.FILE_SHARE_DELETE, nil, windows.OPEN_EXISTING,
		windows.FILE_FLAG_OPEN_REPARSE_POINT|windows.FILE_FLAG_BACKUP_SEMANTICS, 0)
	if err != nil {
		return "", &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer windows.CloseHandle(h)
	sd, err := windows.GetSecurityInfo(h, windows.SE_FILE_OBJECT, windows.OWNER_SECURITY_INFORMATION|windows.DACL_SECURITY_INFORMATION)
	if err != nil {
		return "", &os.PathError{Op: "GetSecurityInfo", Path: path, Err: err}
	}
	return sd.String(), nil
}

// self is the SID of the account the plugin runs as ("" when it cannot be
// read): what it may change, the plugin's account may change anyway.
func self() string {
	u, err := windows.GetCurrentProcessToken().GetTokenUser()
	if err != nil {
		return ""
	}
	return u.User.Sid.String()
}

func mkdirPrivate(path string) error {
	if _, err := os.Stat(path); err == nil {
		return nil
	}
	if parent := filepath.Dir(path); parent != path {
		if _, err := os.Stat(parent); errors.Is(err, os.ErrNotExist) {
			if err := mkdirPrivate(parent); err != nil {
				return err
			}
		}
	}
	sd, err := windows.SecurityDescriptorFromString(PrivateSDDL)
	if err != nil {
		return err
	}
	p, err := windows.UTF16PtrFromString(path)
	if err != nil {
		return err
	}
	sa := &windows.SecurityAttributes{Length: uint32(unsafeSizeofSA), SecurityDescriptor: sd}
	if err := windows.CreateDirectory(p, sa); err != nil && !errors.Is(err, windows.ERROR_ALREADY_EXISTS) {
		return &os.PathError{Op: "mkdir", Path: path, Err: err}
	}
	return nil
}

// privateOwned is the security descriptor setPrivate gives a folder that
// exists: PrivateSDDL's, owned by Administrators.
const privateOwned = "O:BA" + PrivateSDDL

// setObjectPrivate gives the folder at path the security descriptor
// privateOwned (its DACL protected: what it inherited is dropped, and
// what it holds inherits the new one). The folder is opened itself, never
// through a link (FILE_FLAG_OPEN_REPARSE_POINT), checked to be a folder
// and no reparse point on that handle, and changed through it: one made
// by another user, who may swap it for a junction after the caller's
// check, cannot steer the change onto the junction's target.
func setObjectPrivate(path string) error {
	sd, err := windows.SecurityDescriptorFromString(privateOwned)
	if err != nil {
		return err
	}
	owner, _, err := sd.Owner()
	if err != nil {
		return err
	}
	dacl, _, err := sd.DACL()
	if err != nil {
		return err
	}
	p, err := windows.UTF16PtrFromString(path)
	if err != nil {
		return err
	}
	h, err := windows.CreateFile(p, windows.READ_CONTROL|windows.WRITE_DAC|windows.WRITE_OWNER,
		windows.FILE_SHARE_READ|windows.FILE_SHARE_WRITE|windows.FILE_SHARE_DELETE, nil, windows.OPEN_EXISTING,
		windows.FILE_FLAG_OPEN_REPARSE_POINT|windows.FILE_FLAG_BACKUP_SEMANTICS, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer windows.CloseHandle(h)
	var info windows.ByHandleFileInformation
	if err := windows.GetFileInformationByHandle(h, &info); err != nil {
		return &os.PathError{Op: "GetFileInformationByHandle", Path: path, Err: err}
	}
	if info.FileAttributes&windows.FILE_ATTRIBUTE_DIRECTORY == 0 || info.FileAttributes&windows.FILE_ATTRIBUTE_REPARSE_POINT != 0 {
		return fmt.Errorf("%s is not a folder of its own (a file, a link or a junction): nothing was changed", path)
	}
	if err := windows.SetSecurityInfo(h, windows.SE_FILE_OBJECT,
		windows.OWNER_SECURITY_INFORMATION|windows.DACL_SECURITY_INFORMATION|windows.PROTECTED_DACL_SECURITY_INFORMATION,
		owner, nil, dacl, nil); err != nil {
		return &os.PathError{Op: "SetSecurityInfo", Path: path, Err: err}
	}
	return nil
}

func createSecret(path string) (*os.File, error) {
	sd, err := windows.SecurityDescriptorFromString(PrivateFileSDDL)
	if err != nil {
		return nil, err
	}
	p, err := windows.UTF16PtrFromString(path)
	if err != nil {
		return nil, err
	}
	sa := &windows.SecurityAttributes{Length: uint32(unsafeSizeofSA), SecurityDescriptor: sd}
	h, err := windows.CreateFile(p, windows.GENERIC_WRITE, 0, sa, windows.CREATE_NEW, windows.FILE_ATTRIBUTE_NORMAL, 0)
	if err != nil {
		return nil, &os.PathError{Op: "create", Path: path, Err: err}
	}
	return os.NewFile(uintptr(h), path), nil
}

func secretFix(path string) string {
	return fixFor(path, false) + " (a restarted plugin writes a new one so)"
}

// fixFor says how to give the object back to the node's administrators;
// a link's own security descriptor, not its target's (icacls /l).
func fixFor(path string, link bool) string {
	l := ""
	if link {
		l = " /l"
	}
	return `give it to SYSTEM and Administrators alone, as an administrator: icacls "` + path + `"` + l +
		` /inheritance:r /grant:r "*S-1-5-18:(OI)(CI)F" "*S-1-5-32-544:(OI)(CI)F" && icacls "` + path + `"` + l + ` /setowner "*S-1-5-32-544"`
}
