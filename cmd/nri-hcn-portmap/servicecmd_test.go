package main

import (
	"errors"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/nodefs"
)

// sddlFS is a node's folders as SDDL, by path; what it does not name is
// missing.
type sddlFS map[string]struct {
	kind nodefs.Kind
	sddl string
}

func (f sddlFS) Lstat(path string) (nodefs.Entry, error) {
	o, ok := f[filepath.Clean(path)]
	if !ok {
		return nodefs.Entry{Kind: nodefs.Missing}, nil
	}
	g, err := nodefs.Grants(o.sddl, "", o.kind)
	return nodefs.Entry{Kind: o.kind, Grants: g}, err
}

// Issue 46: service install refuses an executable whose file or folder
// others may change (whoever replaces it runs as SYSTEM), naming them and
// the fix, as the configuration check does; one under Program Files
// (TrustedInstaller's, Users may read) is installed.
func TestServiceInstallChecksWhatItInstalls(t *testing.T) {
	root := string(filepath.Separator)
	if runtime.GOOS == "windows" {
		root = `C:\`
	}
	at := func(p string) string { return filepath.Join(root, filepath.FromSlash(p)) }
	const (
		ti          = "S-1-5-80-956008885-3418522649-1831038044-1853292631-2271478464"
		programs    = "O:" + ti + "D:PAI(A;OICIIO;GA;;;CO)(A;OICI;FA;;;SY)(A;OICI;FA;;;BA)(A;OICI;0x1200a9;;;BU)"
		inherited   = "O:BAD:AI(A;OICIID;FA;;;SY)(A;OICIID;FA;;;BA)(A;OICIID;0x1200a9;;;BU)"
		usersModify = "O:BAD:AI(A;OICIID;FA;;;SY)(A;OICIID;FA;;;BA)(A;OICIID;0x1301bf;;;BU)"
	)
	fs := sddlFS{
		at(""):                                {nodefs.Dir, "O:" + ti + "D:PAI(A;OICI;FA;;;SY)(A;OICI;FA;;;BA)(A;OICI;0x1200a9;;;BU)(A;CI;LC;;;BU)(A;CIIO;DC;;;BU)"},
		at("Program Files"):                   {nodefs.Dir, programs},
		at("Program Files/nri-hcn-portmap"):   {nodefs.Dir, inherited},
		at("Program Files/nri-hcn-portmap/x"): {nodefs.File, inherited},
		at("Users"):                           {nodefs.Dir, programs},
		at("Users/Public"):                    {nodefs.Dir, usersModify},
		at("Users/Public/x"):                  {nodefs.File, usersModify},
		at("tools"):                           {nodefs.Dir, programs},
		at("tools/x"):                         {nodefs.File, "O:BAD:(A;;FA;;;SY)(A;;FA;;;BA)(A;;FW;;;AU)"},
	}
	c := nodefs.Checker{FS: fs}
	if err := checkInstall(c, at("Program Files/nri-hcn-portmap/x"), ""); err != nil {
		t.Fatalf("under Program Files: %v", err)
	}
	for exe, who := range map[string]string{"Users/Public/x": "Users/Public", "tools/x": "tools/x"} {
		err := checkInstall(c, at(exe), "")
		var we *nodefs.WritableError
		if !errors.As(err, &we) || we.Path != at(who) || !strings.Contains(err.Error(), "the executable the service would run as SYSTEM") ||
			!strings.Contains(err.Error(), "Program Files") {
			t.Errorf("%s: %v, want refused naming %s and where to install from", exe, err, at(who))
		}
	}
}
