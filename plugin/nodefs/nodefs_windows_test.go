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

// Issue 53, on Windows (and under wine): service install's MakePrivate
// takes a folder that exists (SetNamedSecurityInfo with an owner and a
// protected DACL), and WriteSecret replaces a file that was there with a
// new one holding what it wrote, which CheckSecret passes.
func TestMakePrivateAndWriteSecretOnWindows(t *testing.T) {
	dir := filepath.Join(testfs.TempDir(t), "nri-hcn-portmap")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := MakePrivate(dir); err != nil {
		t.Fatalf("MakePrivate on a folder that exists: %v", err)
	}
	if err := CheckFolder(dir); err != nil {
		t.Fatalf("the folder MakePrivate took: %v", err)
	}
	key := filepath.Join(dir, "admin.key")
	if err := os.WriteFile(key, []byte("planted"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := WriteSecret(key, []byte("secret")); err != nil {
		t.Fatalf("WriteSecret over a file: %v", err)
	}
	if got, err := os.ReadFile(key); err != nil || string(got) != "secret" {
		t.Fatalf("read back %q, %v", got, err)
	}
	if err := CheckSecret(key); err != nil {
		t.Fatalf("the secret WriteSecret wrote: %v", err)
	}
	if err := WriteSecret(key, []byte("again")); err != nil {
		t.Fatalf("WriteSecret over its own file: %v", err)
	}
}
