package nodefs

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/windows"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/test/testfs"
)

// On Windows (and under wine): a folder MkdirPrivate makes, and a file
// made in it, pass Check.
func TestMkdirPrivateAndCheckOnWindows(t *testing.T) {
	dir := filepath.Join(testfs.TempDir(t), "nri-hcn-portmap")
	if err := MkdirPrivate(dir); err != nil {
		t.Fatal(err)
	}
	sd, err := windows.GetNamedSecurityInfo(dir, windows.SE_FILE_OBJECT, windows.DACL_SECURITY_INFORMATION|windows.OWNER_SECURITY_INFORMATION)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the folder: %s", sd.String())
	cfg := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(cfg, []byte("[plugin]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Check(cfg); err != nil {
		t.Fatalf("a file in a private folder: %v", err)
	}
}

// On a Windows host: a file whose DACL lets Users modify it is refused
// naming it. Wine keeps no ACL on its files (it reads back its own user as
// the owner with full control, whatever was set), so there the decision is
// TestWritersFromSDDL's alone; this one runs in the Windows workflow.
func TestCheckRefusesAFileUsersMayModify(t *testing.T) {
	if underWine() {
		t.Skip("wine stores no ACLs: the decision is tested on SDDL strings (TestWritersFromSDDL)")
	}
	dir := filepath.Join(testfs.TempDir(t), "nri-hcn-portmap")
	if err := MkdirPrivate(dir); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(cfg, []byte("[plugin]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	open, err := windows.SecurityDescriptorFromString("D:P(A;;FA;;;BA)(A;;FA;;;SY)(A;;0x1301bf;;;BU)")
	if err != nil {
		t.Fatal(err)
	}
	dacl, _, err := open.DACL()
	if err != nil {
		t.Fatal(err)
	}
	if err := windows.SetNamedSecurityInfo(cfg, windows.SE_FILE_OBJECT, windows.DACL_SECURITY_INFORMATION|windows.PROTECTED_DACL_SECURITY_INFORMATION,
		nil, nil, dacl, nil); err != nil {
		t.Fatal(err)
	}
	var we *WritableError
	if err := Check(cfg); !errors.As(err, &we) || we.Path != cfg || !strings.Contains(err.Error(), `BUILTIN\Users`) {
		t.Fatalf("a file Users may modify: %v, want refused naming BUILTIN\\Users", err)
	}
}

// underWine reports whether this runs under wine (its ntdll exports
// wine_get_version).
func underWine() bool {
	return windows.NewLazySystemDLL("ntdll.dll").NewProc("wine_get_version").Find() == nil
}
