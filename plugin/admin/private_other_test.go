//go:build !windows

package admin

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Issue 46: the socket folder is the plugin's own folder, never a link:
// a link (even to a root-only folder) may be re-pointed later, and root's
// reload would then be served wherever it points. A private folder serves.
func TestListenPrivateRefusesALinkedSocketFolder(t *testing.T) {
	base, err := os.MkdirTemp("", "admin-sock-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	private := filepath.Join(base, "private")
	if err := os.Mkdir(private, 0o700); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(base, "run")
	if err := os.Symlink(private, link); err != nil {
		t.Fatal(err)
	}
	if l, err := ListenPrivate(filepath.Join(link, "admin.sock")); err == nil || !strings.Contains(err.Error(), "is a link") {
		if l != nil {
			l.Close()
		}
		t.Fatalf("ListenPrivate through a linked folder: %v, want refused", err)
	}
	if _, err := os.Stat(filepath.Join(private, "admin.sock")); !os.IsNotExist(err) {
		t.Fatalf("a socket was made through the link: %v", err)
	}
	l, err := ListenPrivate(filepath.Join(private, "admin.sock"))
	if err != nil {
		t.Fatalf("ListenPrivate in a private folder: %v", err)
	}
	l.Close()
}
