package testfs

import (
	"go/build"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The packages make test-windows runs under wine (test/hnsemu/test-windows.sh)
// make their temporary folders with TempDir: t.TempDir's cleanup fails
// there, and the test with it. A test file that builds for Windows (its
// name and build lines, with the hnsemu tag the wine suite sets) and calls
// TempDir on a testing value is named here, before CI runs it under wine.
func TestTheWineSuitesMakeTheirFoldersHere(t *testing.T) {
	ctx := build.Default
	ctx.GOOS, ctx.GOARCH, ctx.BuildTags = "windows", "amd64", []string{"hnsemu"}
	call := regexp.MustCompile(`\b(t|b|tb|f)\.TempDir\(\)`)
	seen := 0
	for _, top := range []string{"config", "plugin", "hcn", "cmd"} {
		err := filepath.WalkDir(filepath.Join("..", "..", top), func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, "_test.go") {
				return err
			}
			ok, err := ctx.MatchFile(filepath.Dir(path), d.Name())
			if err != nil || !ok {
				return err
			}
			seen++
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			for i, line := range strings.Split(string(data), "\n") {
				if call.MatchString(line) {
					t.Errorf("%s:%d: %s: runs under wine (make test-windows), whose t.TempDir cleanup fails; use testfs.TempDir(t)",
						path, i+1, strings.TrimSpace(line))
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if seen < 50 {
		t.Fatalf("%d test files build for Windows under config, plugin, hcn and cmd: the walk did not find the packages", seen)
	}
}
