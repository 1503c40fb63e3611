package service

import (
	"errors"
	"fmt"
	"time"
)

// SCM is the part of the service control manager uninstall uses: the seam
// where a test holds the SCM's rule on handles (uninstall_test.go), and
// service_windows.go puts x/sys/windows/svc/mgr.
//
// The rule (MS-SCMR 3.1.4.3, RDeleteService): deleting a service marks it
// for deletion; the SCM removes it when its last handle closes. Until then
// OpenService still opens it (ROpenServiceW does not fail on a service
// marked for deletion) and creating a service of its name fails with
// ERROR_SERVICE_MARKED_FOR_DELETE (1072).
type SCM interface {
	// Open opens the named service; ErrNoService when none is installed.
	Open(name string) (Service, error)
}

// Service is an open handle on a service.
type Service interface {
	Stopped() (bool, error)
	Stop() error
	Delete() error
	Close() error
}

var (
	// ErrNoService: no service of that name is installed
	// (ERROR_SERVICE_DOES_NOT_EXIST).
	ErrNoService = errors.New("no such service is installed")
	// ErrMarkedForDelete: the service is deleted but another program
	// still holds it open, so the SCM keeps it (and refuses a new
	// service of its name) until that program closes it.
	ErrMarkedForDelete = errors.New("the service is marked for deletion")
)

// UninstallWaits is how uninstall waits: for a running service to stop
// (StopPolls polls), then for the SCM to remove the deleted service
// (GonePolls polls), Every apart.
type UninstallWaits struct {
	StopPolls, GonePolls int
	Every                time.Duration
	Sleep                func(time.Duration)
}

// DefaultUninstallWaits: 30 s for the plugin to stop (it rolls back
// in-flight HNS work), 10 s for the SCM to drop the service.
func DefaultUninstallWaits() UninstallWaits {
	return UninstallWaits{StopPolls: 60, GonePolls: 20, Every: 500 * time.Millisecond, Sleep: time.Sleep}
}

// UninstallFrom stops the named service, deletes it, closes its own handle
// and waits until the SCM has removed it: a service another program holds
// open (the Services console, Event Viewer, an sc.exe) stays marked for
// deletion, and that is said, with what to do, instead of a success that a
// reinstall would then contradict.
func UninstallFrom(scm SCM, name string, w UninstallWaits) error {
	s, err := scm.Open(name)
	if err != nil {
		return fmt.Errorf("service uninstall: %s: %w", name, err)
	}
	if stopped, err := s.Stopped(); err == nil && !stopped {
		if err := s.Stop(); err == nil {
			for range w.StopPolls {
				if stopped, err := s.Stopped(); err != nil || stopped {
					break
				}
				w.Sleep(w.Every)
			}
		}
	}
	err = s.Delete()
	_ = s.Close() // our handle too keeps the service: closed before looking
	if err != nil {
		return fmt.Errorf("service uninstall: %s: %w", name, err)
	}
	for i := 0; ; i++ {
		again, err := scm.Open(name)
		if errors.Is(err, ErrNoService) {
			return nil
		}
		if err == nil {
			_ = again.Close()
		}
		if i >= w.GonePolls {
			return fmt.Errorf("service uninstall: %s is deleted but still held open by another program (the Services console, Event Viewer, "+
				"an sc.exe or PowerShell session): the service control manager removes it when they close it (or at a reboot), and "+
				"a service install before that fails: %w", name, ErrMarkedForDelete)
		}
		w.Sleep(w.Every)
	}
}
