//go:build !windows

package nodefs

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Check on real files: a private folder and a root-only file pass; a file
// others may write, or one in a folder they may write, is refused naming
// the path and who; a socket folder that is a link (even root's) is
// refused, and a link another user owns in a sticky folder is refused on
// the way.
func TestCheckRefusesWhatOthersMayChange(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root: files owned by root are what the plugin trusts") // CI runs as root; counted as skipped, not passed
	}
	base, err := os.MkdirTemp("", "nodefs-") // under /tmp, sticky: what is above a test's folder
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	dir := filepath.Join(base, "etc")
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
	if err := CheckFolder(dir); err != nil {
		t.Fatalf("a root-only folder: %v", err)
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
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	// issue 46: a socket folder that is a link: root's, to a root-only
	// folder, is refused as a place to serve; another user's is refused
	// on the way to anything
	link := filepath.Join(base, "sock")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	if err := CheckFolder(link); err == nil || !strings.Contains(err.Error(), "is a link") {
		t.Fatalf("a socket folder that is a link: %v", err)
	}
	if err := os.Lchown(link, 1001, 1001); err != nil {
		t.Fatal(err)
	}
	if err := Check(filepath.Join(link, "config.toml")); !errors.As(err, &we) || we.Path != link || !strings.Contains(err.Error(), "uid 1001, its owner") {
		t.Fatalf("through another user's link: %v", err)
	}
}
