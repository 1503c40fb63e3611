//go:build !windows

package admin

import (
	"io"
	"net"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
)

// helperDialEnv, when the test binary runs as the helper (TestMain), is
// the address it dials, writes a byte to and reads one back from: exit 0
// when it was answered, 4 when it was hung up on.
const helperDialEnv = "NRI_HCN_PORTMAP_TEST_DIAL_TCP"

func dialAndRead(addr string) int {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return 3
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	b := []byte{1}
	if _, err := c.Write(b); err != nil {
		return 4
	}
	if _, err := io.ReadFull(c, b); err != nil {
		return 4
	}
	return 0
}

// echoOnce serves l: each connection accepted gets its byte back.
func echoOnce(l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			b := []byte{0}
			if _, err := io.ReadFull(c, b); err == nil {
				_, _ = c.Write(b)
			}
		}()
	}
}

// Issue 57: the NodeNetworkService speaks ncproxy's gRPC, which has no
// authentication; its listener answers root and the plugin's own user,
// and hangs up on a program of anyone else on the node.
func TestListenAdminsHangsUpOnAnotherUsersProgram(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to run the helper as another user") // CI runs as root; counted as skipped, not passed
	}
	log := logrus.New()
	log.SetOutput(io.Discard)
	l, err := ListenAdmins("127.0.0.1:0", logrus.NewEntry(log))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go echoOnce(l)
	if got := dialAndRead(l.Addr().String()); got != 0 {
		t.Fatalf("root's connection: exit %d, want answered", got)
	}

	dir, err := os.MkdirTemp("", "admin-peer-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	exe := helperIn(t, dir)
	for _, tt := range []struct {
		uid  uint32
		exit int
	}{{1001, 4}, {0, 0}} {
		helper := exec.Command(exe, "-test.run=^$")
		helper.Env = append(os.Environ(), helperDialEnv+"="+l.Addr().String())
		helper.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: tt.uid, Gid: tt.uid}}
		err := helper.Run()
		got := 0
		if ee, ok := err.(*exec.ExitError); ok {
			got = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if got != tt.exit {
			t.Errorf("uid %d's program: exit %d, want %d (0 answered, 4 hung up on)", tt.uid, got, tt.exit)
		}
	}
}
