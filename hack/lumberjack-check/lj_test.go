// Package lumberjackcheck holds the test that decided whether the plugin's
// log file (plugin/logfile) could be gopkg.in/natefinch/lumberjack.v2: not
// while lumberjack loses every line once a rotation is due and the rename
// fails, as it does on Windows while a reader holds the file without delete
// sharing (issue 25). Its own module, so the product's go.mod does not list
// lumberjack. Run as root (a bind mount makes the rename fail):
// cd hack/lumberjack-check && go test .
package lumberjackcheck

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/logfile"
	"gopkg.in/natefinch/lumberjack.v2"
)

// The log file's rename fails as on Windows when a reader holds it without
// delete sharing: here, the file bind-mounted onto itself (rename: EBUSY),
// still the same file to open and append to. plugin/logfile keeps every
// line; lumberjack v2.2.1 loses them (if a new version stops losing them,
// this fails: time to look again).
func TestFailedRename(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("run as root: the test makes the rename fail with a bind mount")
	}
	for _, tc := range []struct {
		name     string
		open     func(path string) io.WriteCloser
		wantLoss bool
	}{
		{"lumberjack", func(p string) io.WriteCloser { return &lumberjack.Logger{Filename: p, MaxSize: 1, MaxBackups: 1} }, true},
		{"logfile", func(p string) io.WriteCloser { w, _ := logfile.Open(p, 1<<20, 1); return w }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "log.txt")
			w := tc.open(path)
			line := strings.Repeat("x", 1000) + "\n"
			for range 900 { // 0.9 MB: below the cap
				if _, err := io.WriteString(w, line); err != nil {
					t.Fatal(err)
				}
			}
			if out, err := exec.Command("mount", "--bind", path, path).CombinedOutput(); err != nil {
				t.Fatalf("mount: %v %s", err, out)
			}
			defer exec.Command("umount", path).Run()
			if err := os.Rename(path, path+".probe"); err == nil {
				t.Fatal("rename succeeded: the obstacle does not work")
			}
			failed := 0
			for i := range 300 { // past the cap: a rotation is due
				if _, err := fmt.Fprintf(w, "after %03d %s\n", i, strings.Repeat("y", 990)); err != nil {
					failed++
				}
			}
			w.Close()
			exec.Command("umount", path).Run()
			all := ""
			matches, _ := filepath.Glob(filepath.Join(dir, "*"))
			for _, m := range matches {
				b, _ := os.ReadFile(m)
				all += string(b)
			}
			lost := 0
			for i := range 300 {
				if !strings.Contains(all, fmt.Sprintf("after %03d ", i)) {
					lost++
				}
			}
			t.Logf("%s: %d of 300 writes failed, %d lines lost, files %v", tc.name, failed, lost, matches)
			if (lost > 0) != tc.wantLoss {
				t.Errorf("%s lost %d lines while the rename failed; the decision expected loss: %v", tc.name, lost, tc.wantLoss)
			}
		})
	}
}
