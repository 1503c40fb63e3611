//go:build windows

package service

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/windows/svc/eventlog"

	"golang.org/x/sys/windows"
	"golang.org/x/sys/windows/svc"
	"golang.org/x/sys/windows/svc/mgr"
)

// IsService reports whether the process runs under the SCM.
func IsService() (bool, error) { return svc.IsWindowsService() }

// Run runs as the named service until the SCM stops it.
func Run(name string, run RunFunc, reload func()) error {
	return svc.Run(name, &handler{run: run, reload: reload})
}

type handler struct {
	run    RunFunc
	reload func()
	every  time.Duration // between StopPending reports; ProgressEvery when 0
}

func (h *handler) Execute(_ []string, r <-chan svc.ChangeRequest, s chan<- svc.Status) (bool, uint32) {
	// Pre-shutdown: at system shutdown the SCM waits for us (with progress
	// reports) instead of the few seconds a plain shutdown notice allows.
	const accepts = svc.AcceptStop | svc.AcceptShutdown | svc.AcceptPreShutdown | svc.AcceptParamChange
	requests := make(chan Request)
	var (
		mu      sync.Mutex // current is reported from Handle's goroutine and read by the request loop's
		current svc.Status
	)
	report := func(st State) {
		mu.Lock()
		defer mu.Unlock()
		switch st {
		case StartPending:
			current = svc.Status{State: svc.StartPending}
		case Running:
			current = svc.Status{State: svc.Running, Accepts: accepts}
		case StopPending:
			// each report is progress: the next checkpoint, with a wait
			// hint well above the interval between reports
			cp := uint32(1)
			if current.State == svc.StopPending {
				cp = current.CheckPoint + 1
			}
			current = svc.Status{State: svc.StopPending, CheckPoint: cp, WaitHint: uint32(3 * max(h.every, ProgressEvery) / time.Millisecond)}
		}
		s <- current
	}
	go func() {
		stopping := false
		for c := range r {
			if stopping {
				// Handle takes no more requests, but x/sys/svc's handler
				// blocks until each is taken: answer an interrogation with
				// the state we are in, ignore the rest
				if c.Cmd == svc.Interrogate {
					mu.Lock()
					st := current
					mu.Unlock()
					s <- st
				}
				continue
			}
			switch c.Cmd {
			case svc.Interrogate:
				requests <- Interrogate
			case svc.Stop:
				requests <- Stop
				stopping = true
			case svc.Shutdown, svc.PreShutdown:
				requests <- Shutdown
				stopping = true
			case svc.ParamChange:
				requests <- ParamChange
			}
		}
		close(requests)
	}()
	// x/sys reports Stopped with this exit code when Execute returns: the
	// only Stopped the SCM sees
	every := h.every
	if every == 0 {
		every = ProgressEvery
	}
	code := HandleWith(requests, report, h.run, h.reload, every)
	return code != 0, code
}

// ReportError writes msg to the Windows event log as the service's error
// (the event source is registered at install); best effort.
func ReportError(name, msg string) {
	l, err := eventlog.Open(name)
	if err != nil {
		return
	}
	defer l.Close()
	_ = l.Error(1, msg)
}

// Exists reports whether a service of that name is installed.
func Exists(name string) bool {
	m, err := mgr.Connect()
	if err != nil {
		return false
	}
	defer m.Disconnect()
	s, err := m.OpenService(name)
	if err != nil {
		return false
	}
	s.Close()
	return true
}

// Available: Windows has services.
func Available() error { return nil }

// Install registers the service as planned (InstallOn: a service of its
// name already there, or marked for deletion, is said to be).
func Install(p Plan) error {
	m, err := mgr.Connect()
	if err != nil {
		return fmt.Errorf("service install: connecting to the service control manager: %w", err)
	}
	defer m.Disconnect()
	return InstallOn(scm{m}, p)
}

// Uninstall stops and deletes the service, and waits until the SCM has
// removed it (UninstallFrom).
func Uninstall(name string) error {
	m, err := mgr.Connect()
	if err != nil {
		return fmt.Errorf("service uninstall: connecting to the service control manager: %w", err)
	}
	defer m.Disconnect()
	if err := UninstallFrom(scm{m}, name, DefaultUninstallWaits()); err != nil {
		return err
	}
	_ = eventlog.Remove(name)
	return nil
}

// scm is the SCM seam over x/sys's service manager.
type scm struct{ m *mgr.Mgr }

func (c scm) Open(name string) (Service, error) {
	s, err := c.m.OpenService(name)
	if errors.Is(err, windows.ERROR_SERVICE_DOES_NOT_EXIST) {
		return nil, fmt.Errorf("%w (%w)", ErrNoService, err)
	}
	if err != nil {
		return nil, err
	}
	return service{s}, nil
}

func (c scm) Create(p Plan) (Service, error) {
	s, err := c.m.CreateService(p.Name, p.Exe, mgr.Config{
		DisplayName: p.DisplayName, Description: p.Description, StartType: mgr.StartAutomatic,
		// a failed start is logged in the system event log and the boot
		// goes on (the default, ignore, logs nothing)
		ErrorControl: mgr.ErrorNormal,
		Dependencies: p.Dependencies,
	}, p.Args...)
	if errors.Is(err, windows.ERROR_SERVICE_MARKED_FOR_DELETE) {
		return nil, fmt.Errorf("%w (%w)", ErrMarkedForDelete, err)
	}
	if err != nil {
		return nil, err
	}
	actions := make([]mgr.RecoveryAction, 0, len(p.Recovery))
	for _, a := range p.Recovery {
		t := mgr.NoAction
		if a.Restart {
			t = mgr.ServiceRestart
		}
		actions = append(actions, mgr.RecoveryAction{Type: t, Delay: a.Delay})
	}
	// the event source for start-up errors (ReportError); an SCM host
	// without it (wine) still gets the log file
	if err := eventlog.InstallAsEventCreate(p.Name, eventlog.Error|eventlog.Warning|eventlog.Info); err != nil &&
		!errors.Is(err, windows.ERROR_ACCESS_DENIED) && !strings.Contains(err.Error(), "registry key already exists") {
		s.Close()
		return nil, fmt.Errorf("event log source: %w", err)
	}
	if err := s.SetRecoveryActions(actions, uint32(p.ResetPeriod/time.Second)); err != nil {
		s.Close()
		return nil, fmt.Errorf("recovery actions: %w", err)
	}
	// Also recover when the service exits with an error rather than
	// crashing. An SCM without this setting (wine's) answers
	// ERROR_INVALID_LEVEL: the crash recovery above still applies.
	if err := s.SetRecoveryActionsOnNonCrashFailures(true); err != nil && !errors.Is(err, windows.ERROR_INVALID_LEVEL) {
		s.Close()
		return nil, fmt.Errorf("recovery on non-crash failures: %w", err)
	}
	return service{s}, nil
}

type service struct{ s *mgr.Service }

// State is the SCM's state in sc.exe query's words.
func (s service) State() (string, error) {
	st, err := s.s.Query()
	if err != nil {
		return "", err
	}
	switch st.State {
	case svc.Stopped:
		return StateStopped, nil
	case svc.StartPending:
		return "start-pending", nil
	case svc.StopPending:
		return "stop-pending", nil
	case svc.Running:
		return "running", nil
	case svc.ContinuePending:
		return "continue-pending", nil
	case svc.PausePending:
		return "pause-pending", nil
	case svc.Paused:
		return "paused", nil
	}
	return fmt.Sprintf("state %d", st.State), nil
}

// Marked reads both signals of a service marked for deletion: its start
// type, which RDeleteService sets to SERVICE_DISABLED (MS-SCMR 3.1.4.3:
// the signal MS-SCMR documents; the plugin installs its service
// automatic), and the answer to a change that changes nothing
// (ChangeServiceConfig with SERVICE_NO_CHANGE and no strings, as its
// documentation allows), which for a marked service is
// ERROR_SERVICE_MARKED_FOR_DELETE (RChangeServiceConfigW, MS-SCMR
// 3.1.4.11). Neither alone is relied on: wine's SCM leaves the start type
// as it was (TestADeletedServiceHeldOpenIsKnownAsMarked), and a
// ChangeServiceConfig2 with a NULL info, asked before, is answered without
// the SCM by ReactOS's client and with ERROR_NOACCESS by wine's.
func (s service) Marked() (string, error) {
	c, err := s.s.Config()
	disabled := err == nil && c.StartType == windows.SERVICE_DISABLED
	err = windows.ChangeServiceConfig(s.s.Handle, windows.SERVICE_NO_CHANGE, windows.SERVICE_NO_CHANGE, windows.SERVICE_NO_CHANGE,
		nil, nil, nil, nil, nil, nil, nil)
	if errors.Is(err, windows.ERROR_SERVICE_MARKED_FOR_DELETE) {
		err = ErrMarkedForDelete
	}
	return markedBy(disabled, err)
}

func (s service) Stop() error {
	_, err := s.s.Control(svc.Stop)
	return err
}

func (s service) Delete() error {
	err := s.s.Delete()
	if errors.Is(err, windows.ERROR_SERVICE_MARKED_FOR_DELETE) {
		return fmt.Errorf("%w (%w)", ErrMarkedForDelete, err)
	}
	return err
}

func (s service) Close() error { return s.s.Close() }

// Absent refuses when the service name is installed on this node
// (AbsentFrom).
func Absent(name string) error {
	m, err := mgr.Connect()
	if err != nil {
		return fmt.Errorf("connecting to the service control manager: %w", err)
	}
	defer m.Disconnect()
	return AbsentFrom(scm{m}, name)
}
