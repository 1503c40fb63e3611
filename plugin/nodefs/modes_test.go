//go:build !windows

package nodefs

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The Linux decision: root and the plugin's own user may change what it
// trusts; another owner, a group other than root's or everyone with write
// permission are named.
func TestWritersFromModes(t *testing.T) {
	for _, tc := range []struct {
		name     string
		uid, gid uint32
		mode     os.FileMode
		want     []string
	}{
		{"root's, 0644", 0, 0, 0o644, nil},
		{"root's folder, 0700", 0, 0, os.ModeDir | 0o700, nil},
		{"root's, group root writes", 0, 0, 0o664, nil},
		{"the plugin's own user", 1000, 1000, 0o644, nil},
		{"another owner", 1001, 1001, 0o644, []string{"uid 1001, its owner"}},
		{"group writable", 0, 1001, 0o664, []string{"gid 1001, mode 0664"}},
		{"world writable", 0, 0, 0o666, []string{"every user (mode 0666)"}},
		{"a sticky /tmp-like folder", 0, 0, os.ModeDir | os.ModeSticky | 0o777, []string{"every user (mode 0777)"}},
	} {
		got := Modes(tc.uid, tc.gid, tc.mode, 1000)
		if len(got) != len(tc.want) {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
			continue
		}
		for i, w := range tc.want {
			if !strings.Contains(got[i], w) {
				t.Errorf("%s: %q, want %q", tc.name, got[i], w)
			}
		}
	}
}

// Check on real files: a private folder and a root-only file pass; a file
// others may write, or one in a folder they may write, is refused naming
// the path and who.
func TestCheckRefusesWhatOthersMayChange(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root: files owned by root are what the plugin trusts") // CI runs as root; counted as skipped, not passed
	}
	dir := filepath.Join(t.TempDir(), "etc")
	if err := MkdirPrivate(dir); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("MkdirPrivate: %v, %v", fi.Mode(), err)
	}
	cfg := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(cfg, []byte("[plugin]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Check(cfg); err != nil {
		t.Fatalf("a root-only file: %v", err)
	}
	if err := os.Chmod(cfg, 0o666); err != nil {
		t.Fatal(err)
	}
	var we *WritableError
	if err := Check(cfg); !errors.As(err, &we) || we.Path != cfg || !strings.Contains(err.Error(), "every user (mode 0666)") || !strings.Contains(err.Error(), "chmod go-w") {
		t.Fatalf("a world-writable file: %v", err)
	}
	if err := os.Chmod(cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := Check(cfg); !errors.As(err, &we) || we.Path != dir {
		t.Fatalf("a file in a world-writable folder: %v, want the folder named", err)
	}
}
