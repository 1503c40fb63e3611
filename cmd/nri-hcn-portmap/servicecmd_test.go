package main

import (
	"errors"
	"path/filepath"
	"runtime"
	"slices"
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

// Issue 53: service install leaves the folders the service makes files in
// as its start wants them. The documented steps make the service's folder
// with New-Item under ProgramData, where it inherits BUILTIN\Users' right
// to add files: install gives it to the administrators and says so; a
// missing folder is made theirs; a folder of the operator's naming that
// others may change, or one on the way to the service's, is refused,
// naming it and who, and left as it is.
func TestServiceInstallTakesTheServicesFolderAndNoOther(t *testing.T) {
	root := string(filepath.Separator)
	if runtime.GOOS == "windows" {
		root = `C:\`
	}
	at := func(p string) string { return filepath.Join(root, filepath.FromSlash(p)) }
	const (
		programData = "O:SYD:P(A;OICI;FA;;;SY)(A;OICI;FA;;;BA)(A;OICI;0x1200a9;;;BU)(A;CI;DCLCRPCR;;;BU)"
		newItem     = "O:BAG:SYD:AI(A;OICIID;FA;;;SY)(A;OICIID;FA;;;BA)(A;OICIIOID;GA;;;CO)(A;OICIID;0x1200a9;;;BU)(A;CIID;DCLCRPCR;;;BU)"
		private     = "O:BAD:P(A;OICI;FA;;;BA)(A;OICI;FA;;;SY)"
		usersDelete = "O:BAD:P(A;OICI;FA;;;SY)(A;OICI;FA;;;BA)(A;OICI;0x1301ff;;;BU)"
	)
	node := func() sddlFS {
		return sddlFS{
			at(""):                            {nodefs.Dir, "O:SYD:PAI(A;OICI;FA;;;SY)(A;OICI;FA;;;BA)(A;OICI;0x1200a9;;;BU)(A;CI;LC;;;BU)(A;CIIO;DC;;;BU)"},
			at("ProgramData"):                 {nodefs.Dir, programData},
			at("ProgramData/nri-hcn-portmap"): {nodefs.Dir, newItem},
			at("logs"):                        {nodefs.Dir, newItem},
			at("open"):                        {nodefs.Dir, usersDelete},
		}
	}
	own := at("ProgramData/nri-hcn-portmap")
	for _, tc := range []struct {
		name    string
		folders []string
		taken   []string // what install changes
		said    string   // what it tells the operator
		refused string   // the folder a refusal names
	}{
		{"the documented folder is given to the administrators", []string{own}, []string{own}, `BUILTIN\Users (S-1-5-32-545) (may add files to it)`, ""},
		{"a missing folder is made theirs", []string{own, at("ProgramData/nri-hcn-portmap/logs")}, []string{own, at("ProgramData/nri-hcn-portmap/logs")}, "is now the administrators' own", ""},
		{"a folder of the operator's naming is refused, not changed", []string{own, at("logs")}, []string{own}, "", at("logs")},
		{"a folder under one Users may change is refused", []string{at("open/nri-hcn-portmap")}, nil, "", at("open")},
		{"one folder named twice is taken once", []string{own, own}, []string{own}, "", ""},
		{"a file a user planted while Users could add is refused, naming it", []string{own, at("ProgramData/nri-hcn-portmap/planted")},
			[]string{own}, "", at("ProgramData/nri-hcn-portmap/nri-hcn-portmap.log.1")},
		{"the administrators' own files pass", []string{own, at("ProgramData/nri-hcn-portmap/config")}, []string{own}, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := node()
			var taken []string
			take := func(dir string) error {
				taken = append(taken, dir)
				fs[filepath.Clean(dir)] = struct {
					kind nodefs.Kind
					sddl string
				}{nodefs.Dir, private}
				return nil
			}
			// a row's second folder, under own, names what own holds
			if len(tc.folders) > 1 && strings.HasSuffix(tc.folders[1], "planted") {
				fs[at("ProgramData/nri-hcn-portmap/nri-hcn-portmap.log.1")] = struct {
					kind nodefs.Kind
					sddl string
				}{nodefs.File, "O:S-1-5-21-1-2-3-1001D:(A;;FA;;;S-1-5-21-1-2-3-1001)(A;;FA;;;SY)"}
				tc.folders = tc.folders[:1]
			}
			if len(tc.folders) > 1 && strings.HasSuffix(tc.folders[1], "config") {
				fs[at("ProgramData/nri-hcn-portmap/config.toml")] = struct {
					kind nodefs.Kind
					sddl string
				}{nodefs.File, "O:BAD:AI(A;ID;FA;;;SY)(A;ID;FA;;;BA)(A;ID;0x1200a9;;;BU)"}
				tc.folders = tc.folders[:1]
			}
			list := func(dir string) ([]string, error) { // what the fake holds directly in dir
				var names []string
				for p := range fs {
					if filepath.Dir(p) == filepath.Clean(dir) {
						names = append(names, filepath.Base(p))
					}
				}
				return names, nil
			}
			who := `BUILTIN\Users` // who the refusal names
			if strings.HasSuffix(tc.refused, ".log.1") {
				who = "S-1-5-21-1-2-3-1001, its owner"
			}
			said, err := takeFolders(nodefs.Checker{FS: fs}, own, tc.folders, take, list)
			if !slices.Equal(taken, tc.taken) {
				t.Errorf("changed %v, want %v", taken, tc.taken)
			}
			if tc.said != "" && !strings.Contains(strings.Join(said, "\n"), tc.said) {
				t.Errorf("said %q, want %q", said, tc.said)
			}
			var we *nodefs.WritableError
			switch {
			case tc.refused == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.refused != "" && (!errors.As(err, &we) || we.Path != tc.refused || !strings.Contains(err.Error(), who)):
				t.Errorf("%v, want refused naming %s and %s", err, tc.refused, who)
			}
		})
	}
}
