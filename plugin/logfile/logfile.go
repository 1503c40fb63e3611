// Package logfile is a size-capped, rotating log file: a Windows service has
// no console, and a node's disk must not fill with logs.
package logfile

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/nodefs"
)

// Writer appends to Path; when a write would take it past MaxBytes, the
// file is renamed to Path.1 (Path.1 to Path.2, ...) keeping Keep old files.
type Writer struct {
	path     string
	maxBytes int64
	keep     int

	mu   sync.Mutex
	f    *os.File
	size int64
	// nextTry: after a failed rotation, the size at which to try again
	// (0: rotate at maxBytes)
	nextTry int64
}

// Open opens (or creates) the log file.
func Open(path string, maxBytes int64, keep int) (*Writer, error) {
	if maxBytes <= 0 {
		return nil, fmt.Errorf("log file %s: size cap must be positive", path)
	}
	// the folder is the node administrators' alone: one another user
	// made first, or may add to (rotation makes new files there), would
	// steer where the plugin writes
	if err := nodefs.MkdirPrivate(filepath.Dir(path)); err != nil {
		return nil, fmt.Errorf("log file %s: %w", path, err)
	}
	if err := nodefs.CheckFolder(filepath.Dir(path)); err != nil {
		return nil, fmt.Errorf("log file: %w", err)
	}
	if err := nodefs.Check(path); err != nil {
		return nil, fmt.Errorf("log file: %w", err)
	}
	w := &Writer{path: path, maxBytes: maxBytes, keep: keep}
	if err := w.open(); err != nil {
		return nil, err
	}
	return w, nil
}

func (w *Writer) open() error {
	f, err := os.OpenFile(w.path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("log file %s: %w", w.path, err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return fmt.Errorf("log file %s: %w", w.path, err)
	}
	w.f, w.size = f, st.Size()
	return nil
}

// Write implements io.Writer.
func (w *Writer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.size > 0 && w.size+int64(len(p)) > max(w.maxBytes, w.nextTry) {
		if err := w.rotate(); err != nil {
			// A reader without delete sharing (an antivirus scanner, a
			// tail) can make the rename fail on Windows: keep logging to
			// the current file, say so in it, and try again after another
			// tenth of the cap.
			if w.f == nil {
				if oerr := w.open(); oerr != nil {
					return 0, fmt.Errorf("%w (and reopening: %w)", err, oerr)
				}
			}
			w.nextTry = w.size + max(w.maxBytes/10, 1)
			msg := fmt.Sprintf("log file %s: rotation failed, still writing here: %v\n", w.path, err)
			n, _ := w.f.Write([]byte(msg))
			w.size += int64(n)
		} else {
			w.nextTry = 0
		}
	}
	n, err := w.f.Write(p)
	w.size += int64(n)
	return n, err
}

func (w *Writer) rotate() error {
	err := w.f.Close()
	w.f = nil
	if err != nil {
		return err
	}
	if w.keep == 0 {
		if err := os.Remove(w.path); err != nil && !os.IsNotExist(err) {
			return err
		}
		return w.open()
	}
	_ = os.Remove(fmt.Sprintf("%s.%d", w.path, w.keep))
	for i := w.keep - 1; i >= 1; i-- {
		_ = os.Rename(fmt.Sprintf("%s.%d", w.path, i), fmt.Sprintf("%s.%d", w.path, i+1))
	}
	if err := os.Rename(w.path, w.path+".1"); err != nil {
		return err
	}
	return w.open()
}

// Close closes the file.
func (w *Writer) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.f == nil {
		return nil
	}
	return w.f.Close()
}
