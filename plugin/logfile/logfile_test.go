package logfile

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
			dir := t.TempDir()
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
