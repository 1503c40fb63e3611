package nodefs

import (
	"errors"
	"os"
	"path/filepath"

	"golang.org/x/sys/windows"
)

// writers reads the file's owner and DACL and judges them (Writers).
func writers(path string) ([]string, error) {
	sd, err := windows.GetNamedSecurityInfo(path, windows.SE_FILE_OBJECT,
		windows.OWNER_SECURITY_INFORMATION|windows.DACL_SECURITY_INFORMATION)
	if err != nil {
		return nil, err
	}
	return Writers(sd.String(), self())
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

// fixFor says how to give the object back to the node's administrators.
func fixFor(path string) string {
	return `give it to SYSTEM and Administrators alone, as an administrator: icacls "` + path +
		`" /inheritance:r /grant:r "*S-1-5-18:(OI)(CI)F" "*S-1-5-32-544:(OI)(CI)F" && icacls "` + path + `" /setowner "*S-1-5-32-544"`
}
