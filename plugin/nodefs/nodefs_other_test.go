//go:build !windows

package nodefs

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/test/testfs"
)

// Issue 53: MakePrivate changes the folder itself: an existing one ends
// 0700, a missing one is made so, and a link put where the folder was
// checked (another user's swap) is refused and its target left as it is.
func TestMakePrivateChangesTheFolderNotALink(t *testing.T) {
	dir := testfs.TempDir(t)
	open := filepath.Join(dir, "open")
	if err := os.Mkdir(open, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := MakePrivate(open); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(open); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("a folder MakePrivate took: %v, %v; want 0700", fi.Mode(), err)
	}
	if err := MakePrivate(filepath.Join(dir, "new", "nri-hcn-portmap")); err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(dir, "target")
	if err := os.Mkdir(target, 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "swapped")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if err := MakePrivate(link); err == nil {
		t.Error("a link taken for the folder")
	}
	if fi, err := os.Stat(target); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("the link's target: %v, %v; want it left 0755", fi.Mode(), err)
	}
}
