//go:build !windows

package admin

import (
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
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

// helperServeUnix, when the test binary runs as the helper (TestMain),
// serves a unix socket at the path its environment names: another user's
// program that made the socket first.
const helperEnv = "NRI_HCN_PORTMAP_TEST_SERVE_UNIX"

func TestMain(m *testing.M) {
	if addr := os.Getenv(helperDialEnv); addr != "" {
		os.Exit(dialAndRead(addr))
	}
	if path := os.Getenv(helperEnv); path != "" {
		l, err := net.Listen("unix", path)
		if err != nil {
			os.Exit(3)
		}
		for {
			c, err := l.Accept()
			if err != nil {
				os.Exit(0)
			}
			c.Write([]byte("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"))
			c.Close()
		}
	}
	os.Exit(m.Run())
}

// Issue 46: reload's client hangs up on a socket another user's program
// serves (SO_PEERCRED), whoever made it first: only root's or the client's
// own user's server is taken for the plugin.
func TestDialPrivateRefusesAnotherUsersServer(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to run the helper as another user") // CI runs as root; counted as skipped, not passed
	}
	dir, err := os.MkdirTemp("", "admin-peer-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "admin.sock")
	helper := exec.Command(helperIn(t, dir), "-test.run=^$")
	helper.Env = append(os.Environ(), helperEnv+"="+sock)
	helper.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 1001, Gid: 1001}}
	if err := helper.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { helper.Process.Kill(); helper.Wait() })
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(sock); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the helper never served")
		}
		time.Sleep(10 * time.Millisecond)
	}
	c, err := DialPrivate(sock)
	if err == nil {
		c.Close()
	}
	if !errors.Is(err, ErrNotThePlugin) || !strings.Contains(err.Error(), "uid 1001") {
		t.Fatalf("DialPrivate to another user's server: %v, want ErrNotThePlugin naming uid 1001", err)
	}
}

// helperIn copies the test binary into dir, where another user may run it
// (TestMain's helper modes), and returns its path.
func helperIn(t *testing.T, dir string) string {
	t.Helper()
	bin, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(dir, "helper")
	if err := os.WriteFile(exe, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	return exe
}
