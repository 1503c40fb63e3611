package main

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// The version comes from the build (make build stamps it with -ldflags),
// not from the source.
func TestVersionIsStamped(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "nri-hcn-portmap")
	build := exec.Command("go", "build", "-ldflags", "-X main.version=v9.8.7-test", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "version").Output()
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(out)); got != "nri-hcn-portmap v9.8.7-test" {
		t.Fatalf("version = %q", got)
	}
}

// The usage lists the simulator only where it is built (not on Windows).
func TestUsageListsTheCommandsOfThisBuild(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := mainArgs([]string{"help"}, &stdout, &stderr); code != 0 {
		t.Fatalf("help exited %d: %s", code, stderr.String())
	}
	for _, cmd := range []string{"status", "health", "reload", "cleanup", "service install", "version"} {
		if !strings.Contains(stdout.String(), "nri-hcn-portmap "+cmd) {
			t.Errorf("usage does not list %q:\n%s", cmd, stdout.String())
		}
	}
	hasSim := strings.Contains(stdout.String(), "nri-hcn-portmap simulator")
	if hasSim != (runtime.GOOS != "windows") {
		t.Errorf("usage lists the simulator: %v on %s", hasSim, runtime.GOOS)
	}
	stdout.Reset()
	stderr.Reset()
	code := mainArgs([]string{"simulator", "-h"}, &stdout, &stderr)
	if runtime.GOOS == "windows" && (code != 1 || !strings.Contains(stderr.String(), "not part of the Windows build")) {
		t.Errorf("simulator on Windows: exit %d, %q", code, stderr.String())
	}
}
