package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/test/testfs"
)

// The helper process of the wrapper tests: this test binary run by
// "cmd /c", as hcsshim runs a HostProcess container's command under the
// bind filter. It writes what it sees to WRAPPER_OUT.
func TestWrapperHelper(t *testing.T) {
	out := os.Getenv("WRAPPER_OUT")
	if out == "" {
		return // not the helper: nothing to do
	}
	pid, exe, err := parentOf(uint32(os.Getpid()))
	_ = os.WriteFile(out, []byte(fmt.Sprintf("parent %d %s %v\n", pid, exe, err)), 0o644)
	ctx := stopWithWrapper(context.Background(), logrus.NewEntry(logrus.New()))
	select {
	case <-ctx.Done():
		_ = os.WriteFile(out, []byte(fmt.Sprintf("parent %d %s %v\nstopped\n", pid, exe, err)), 0o644)
	case <-time.After(time.Minute):
	}
}

// Issue 30, 7: under the bind filter the stop of a HostProcess container
// reaches the cmd /c wrapper hcsshim puts around the command; the plugin
// sees its wrapper, and stops when the wrapper exits.
func TestStopReachesThePluginThroughTheWrapper(t *testing.T) {
	out := filepath.Join(testfs.TempDir(t), "helper.out")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	wrapper := exec.Command("cmd", "/c", self, "-test.run=^TestWrapperHelper$")
	wrapper.Env = append(os.Environ(), "WRAPPER_OUT="+out, `CONTAINER_SANDBOX_MOUNT_POINT=C:\hpc`)
	if err := wrapper.Start(); err != nil {
		t.Fatal(err)
	}
	read := func() string { b, _ := os.ReadFile(out); return string(b) }
	waitFor := func(what string, ok func(string) bool) string {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if s := read(); ok(s) {
				return s
			}
		}
		t.Fatalf("%s: the helper wrote %q", what, read())
		return ""
	}
	got := waitFor("the helper starts", func(s string) bool { return strings.HasPrefix(s, "parent ") })
	if want := fmt.Sprintf("parent %d cmd.exe <nil>", wrapper.Process.Pid); !strings.HasPrefix(got, want) {
		t.Fatalf("the helper sees %q, want %q (its cmd /c wrapper)", got, want)
	}
	if strings.Contains(got, "stopped") {
		t.Fatal("stopped while the wrapper runs")
	}
	if err := wrapper.Process.Kill(); err != nil { // the stop hits the wrapper
		t.Fatal(err)
	}
	_ = wrapper.Wait()
	waitFor("the helper stops with its wrapper", func(s string) bool { return strings.Contains(s, "stopped") })
}
