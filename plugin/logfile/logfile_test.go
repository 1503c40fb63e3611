package logfile

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/test/testfs"
)

func TestRotation(t *testing.T) {
	tests := []struct {
		keep      int
		wantFiles []string
	}{
		{2, []string{"log.txt", "log.txt.1", "log.txt.2"}},
		{0, []string{"log.txt"}},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("keep=%d", tt.keep), func(t *testing.T) {
			dir := testfs.TempDir(t)
			path := filepath.Join(dir, "sub", "log.txt")
			w, err := Open(path, 100, tt.keep)
			if err != nil {
				t.Fatal(err)
			}
			line := strings.Repeat("x", 39) + "\n" // 40 bytes: two per file
			for i := range 20 {
				if _, err := fmt.Fprintf(w, "%02d%s", i, line[2:]); err != nil {
					t.Fatal(err)
				}
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			entries, _ := os.ReadDir(filepath.Join(dir, "sub"))
			var got []string
			for _, e := range entries {
				got = append(got, e.Name())
				st, _ := os.Stat(filepath.Join(dir, "sub", e.Name()))
				if st.Size() > 100 {
					t.Errorf("%s is %d bytes, over the 100-byte cap", e.Name(), st.Size())
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(tt.wantFiles) {
				t.Fatalf("files %v, want %v", got, tt.wantFiles)
			}
			cur, _ := os.ReadFile(path)
			if !strings.HasPrefix(string(cur), "18") || !strings.Contains(string(cur), "\n19") {
				t.Errorf("current file holds %q, want the last two lines", cur)
			}
			if tt.keep > 0 {
				old, _ := os.ReadFile(path + ".1")
				if !strings.HasPrefix(string(old), "16") {
					t.Errorf("log.txt.1 holds %q, want lines 16-17", old)
				}
			}
		})
	}
}

// Regression (load and faults, 6): when the rename of a rotation failed
// (on Windows: any reader without delete sharing), the writer kept a closed
// file and every later write failed: the log died for good.
func TestFailedRotationKeepsLogging(t *testing.T) {
	dir := testfs.TempDir(t)
	path := filepath.Join(dir, "log.txt")
	// log.txt.1 is a non-empty directory: renaming onto it fails
	if err := os.MkdirAll(filepath.Join(path+".1", "busy"), 0o755); err != nil {
		t.Fatal(err)
	}
	w, err := Open(path, 100, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for i := range 10 {
		if _, err := fmt.Fprintf(w, "line %02d %s\n", i, strings.Repeat("x", 30)); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
	}
	cur, _ := os.ReadFile(path)
	for i := range 10 {
		if !strings.Contains(string(cur), fmt.Sprintf("line %02d", i)) {
			t.Fatalf("line %d lost; file holds %q", i, cur)
		}
	}
	if !strings.Contains(string(cur), "rotation failed, still writing here") {
		t.Errorf("the failure is not said in the log: %q", cur)
	}
	// once the obstacle is gone, rotation works again
	if err := testfs.RemoveAll(path + ".1"); err != nil {
		t.Fatal(err)
	}
	for i := 10; i < 20; i++ {
		if _, err := fmt.Fprintf(w, "line %02d %s\n", i, strings.Repeat("x", 30)); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
	}
	if st, err := os.Stat(path + ".1"); err != nil || st.IsDir() {
		t.Fatalf("no rotated file after the obstacle went: %v", err)
	}
	if st, _ := os.Stat(path); st.Size() > 100 {
		t.Errorf("current file is %d bytes, over the cap again", st.Size())
	}
}
