// Package testfs is t.TempDir for tests that also run as Windows binaries
// under wine (make test-windows). Under wine 8, os.RemoveAll fails
// ("unlinkat ...: Invalid function"): Go deletes with
// NtSetInformationFile(FileDispositionInformationEx), wine answers
// STATUS_INVALID_DEVICE_REQUEST, and Go falls back to the old way only for
// the statuses Windows itself gives (internal/syscall/windows Deleteat).
// os.Remove (DeleteFile, RemoveDirectory) works there, so this removes
// depth first with it when RemoveAll fails. On Linux and on Windows it is
// os.RemoveAll.
package testfs

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"testing"
)

var unsafeName = regexp.MustCompile(`[^A-Za-z0-9_.-]+`)

// TempDir returns a new directory removed when t ends, like t.TempDir.
func TempDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", unsafeName.ReplaceAllString(t.Name(), "_"))
	if err != nil {
		t.Fatalf("TempDir: %v", err)
	}
	t.Cleanup(func() {
		if err := RemoveAll(dir); err != nil {
			t.Errorf("TempDir cleanup: %v", err)
		}
	})
	return dir
}

// RemoveAll is os.RemoveAll, falling back to removing each file and
// directory, deepest first, with os.Remove (see the package comment).
func RemoveAll(path string) error {
	if err := os.RemoveAll(path); err == nil {
		return nil
	}
	var paths []string
	walkErr := filepath.WalkDir(path, func(p string, _ os.DirEntry, err error) error {
		if err == nil {
			paths = append(paths, p)
		}
		return nil
	})
	if walkErr != nil {
		return walkErr
	}
	slices.Reverse(paths) // a directory after what it holds
	for _, p := range paths {
		if err := os.Remove(p); err != nil && !os.IsNotExist(err) {
			return err
		}
	}
	return nil
}
