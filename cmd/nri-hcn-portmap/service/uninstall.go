package service

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/config"
)

// SCM is the part of the service control manager install and uninstall
// use: the seam where a test holds the SCM's rules (uninstall_test.go's
// fake), and service_windows.go puts x/sys/windows/svc/mgr.
//
// The rules (MS-SCMR 3.1.4.3 RDeleteService; DeleteService's
// documentation): deleting a service only marks it (its start type
// becomes disabled); the SCM removes it when its last handle closes and
// it is not running. Until then OpenService still opens it (ROpenServiceW
// lists no error for a marked service), a second DeleteService and any
// change of its configuration (RChangeServiceConfigW) fail with
// ERROR_SERVICE_MARKED_FOR_DELETE (1072), and creating a service of its
// name fails with 1072 too.
type SCM interface {
	// Open opens the named service; ErrNoService when none is installed.
	Open(name string) (Service, error)
	// Create registers the service p plans (its recovery actions
	// included); ErrMarkedForDelete when one of its name is marked.
	Create(p Plan) (Service, error)
}

// Service is an open handle on a service.
type Service interface {
	// State is the SCM's word for where it is: stopped, start-pending,
	// running, stop-pending, ...
	State() (string, error)
	// Marked says how the SCM shows that the service is marked for
	// deletion ("": it does not): its start type, which DeleteService sets
	// to disabled (MS-SCMR 3.1.4.3), or the answer 1072 to a change of its
	// configuration (RChangeServiceConfigW, MS-SCMR 3.1.4.11), or both.
	Marked() (string, error)
	Stop() error
	// Delete marks it for deletion; ErrMarkedForDelete when it already is.
	Delete() error
	Close() error
}

// StateStopped is the SCM's state of a service that is not running.
const StateStopped = "stopped"

var (
	// ErrNoService: no service of that name is installed
	// (ERROR_SERVICE_DOES_NOT_EXIST).
	ErrNoService = errors.New("no such service is installed")
	// ErrMarkedForDelete: the service is deleted, but the SCM keeps it
	// (and refuses a new service of its name) until it has stopped and
	// every program holding it open has closed it
	// (ERROR_SERVICE_MARKED_FOR_DELETE, 1072).
	ErrMarkedForDelete = errors.New("the service is marked for deletion")
	// ErrExists: a service of that name is installed.
	ErrExists = errors.New("already exists")
	// ErrNotStopped: the service did not stop within the wait.
	ErrNotStopped = errors.New("the service did not stop in time")
)

// markedBy says which signal of a service marked for deletion the SCM
// gave ("": none): its start type disabled, and the answer to a change of
// its configuration (ErrMarkedForDelete: 1072; another error is the
// error, unless the start type says it already).
func markedBy(startDisabled bool, changeErr error) (string, error) {
	var seen []string
	if startDisabled {
		seen = append(seen, "its start type is disabled, as deleting a service sets it")
	}
	switch {
	case errors.Is(changeErr, ErrMarkedForDelete):
		seen = append(seen, "the service control manager answers 1072, ERROR_SERVICE_MARKED_FOR_DELETE, to a change of its configuration")
	case changeErr != nil && !startDisabled:
		return "", changeErr
	}
	return strings.Join(seen, "; "), nil
}

// heldOpen says who keeps a marked service, and what to do.
const heldOpen = "another program holds it open (the Services console, Event Viewer, an sc.exe or PowerShell session): " +
	"the service control manager removes it when they close it (close services.msc and Event Viewer), or at a reboot"

// InstallOn registers the service p plans, unless a service of its name is
// there: one marked for deletion is said to be (an earlier uninstall whose
// service is still held open or still running), with what to do, found by
// asking the service itself rather than by a 1072 that OpenService never
// gives.
func InstallOn(scm SCM, p Plan) error {
	if s, err := scm.Open(p.Name); err == nil {
		defer s.Close()
		if seen, merr := s.Marked(); merr == nil && seen != "" {
			return fmt.Errorf("service install: %s was uninstalled but is still marked for deletion (%s): %s; then install again: %w",
				p.Name, seen, stoppedOr(s, heldOpen), ErrMarkedForDelete)
		}
		return fmt.Errorf("service install: service %s %w (uninstall it first: nri-hcn-portmap service uninstall)", p.Name, ErrExists)
	} else if !errors.Is(err, ErrNoService) {
		return fmt.Errorf("service install: %s: %w", p.Name, err)
	}
	s, err := scm.Create(p)
	if errors.Is(err, ErrMarkedForDelete) { // marked between the look and the create
		return fmt.Errorf("service install: %s was uninstalled but is still marked for deletion: %s; then install again: %w", p.Name, heldOpen, err)
	}
	if err != nil {
		return fmt.Errorf("service install: %w", err)
	}
	return s.Close()
}

// stoppedOr says that the service has not stopped yet (naming its state)
// when it runs, else why.
func stoppedOr(s Service, why string) string {
	if st, err := s.State(); err == nil && st != StateStopped {
		return "it has not stopped yet (its state: " + st + "), and the service control manager removes it only once it has; " +
			"wait for it to stop (sc.exe query " + Name + ")"
	}
	return why
}

// UninstallWaits is how uninstall waits: for a running service to stop
// (StopPolls polls), then for the SCM to remove the deleted service
// (GonePolls polls), Every apart.
type UninstallWaits struct {
	StopPolls, GonePolls int
	Every                time.Duration
	Sleep                func(time.Duration)
}

// DefaultUninstallWaits: config.UninstallStopWait for the plugin to stop
// (it rolls back in-flight HNS work), config.UninstallGoneWait for the SCM
// to drop the service.
func DefaultUninstallWaits() UninstallWaits {
	every := config.UninstallPoll
	return UninstallWaits{StopPolls: int(config.UninstallStopWait / every), GonePolls: int(config.UninstallGoneWait / every), Every: every, Sleep: time.Sleep}
}

// UninstallFrom stops the named service, deletes it, closes its own handle
// and waits until the SCM has removed it. What keeps it is said as the
// SCM shows it: a service already marked by an earlier uninstall, one
// that did not stop in time (named with its state), one another program
// holds open (the Services console, Event Viewer, an sc.exe), each with
// what to do, instead of a success that a reinstall would then contradict.
func UninstallFrom(scm SCM, name string, w UninstallWaits) error {
	s, err := scm.Open(name)
	if err != nil {
		return fmt.Errorf("service uninstall: %s: %w", name, err)
	}
	if seen, err := s.Marked(); err == nil && seen != "" {
		why := stoppedOr(s, heldOpen)
		_ = s.Close()
		return fmt.Errorf("service uninstall: %s is already marked for deletion by an earlier uninstall (%s): %s: %w", name, seen, why, ErrMarkedForDelete)
	}
	if st, err := s.State(); err == nil && st != StateStopped {
		if err := s.Stop(); err == nil {
			for range w.StopPolls {
				if st, err = s.State(); err != nil || st == StateStopped {
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
		if err != nil {
			return fmt.Errorf("service uninstall: %s is marked for deletion; looking whether it is gone: %w", name, err)
		}
		st, serr := again.State()
		_ = again.Close()
		switch {
		case i < w.GonePolls:
			w.Sleep(w.Every)
		case serr == nil && st != StateStopped:
			return fmt.Errorf("service uninstall: %s is marked for deletion but has not stopped (its state: %s): the service control "+
				"manager removes it once it has; the plugin rolls back in-flight HNS work as it stops, and a stop that does not end "+
				"is in its log (wait, then sc.exe query %s): %w", name, st, name, ErrNotStopped)
		default:
			return fmt.Errorf("service uninstall: %s is marked for deletion but not removed: %s; a service install before that fails: %w",
				name, heldOpen, ErrMarkedForDelete)
		}
	}
}

// ErrServiceInstalled: the plugin's Windows service is installed on the
// node, so a DaemonSet's pod there would map the node's pods beside it.
var ErrServiceInstalled = errors.New("the plugin's Windows service is installed on this node")

// AbsentFrom says nothing when no service name is installed, and refuses
// (ErrServiceInstalled, naming its state and how to move the node to the
// DaemonSet) when one is, running or not: the DaemonSet's init step, so
// that a node never runs both (the second one fails to bind admin.listen
// anyway, and a stopped service would start again at the next boot).
func AbsentFrom(scm SCM, name string) error {
	s, err := scm.Open(name)
	if errors.Is(err, ErrNoService) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("asking the service control manager for %s: %w", name, err)
	}
	defer s.Close()
	state, err := s.State()
	if err != nil {
		state = "state unknown: " + err.Error()
	}
	return fmt.Errorf("%w: %s (%s); the DaemonSet's pod would map this node's pods beside it: "+
		"uninstall the service first (Stop-Service %s; nri-hcn-portmap.exe service uninstall; docs/operating.md, "+
		"\"Moving a node between the service and the DaemonSet\"), and the pod starts at its next try",
		ErrServiceInstalled, name, state, name)
}
