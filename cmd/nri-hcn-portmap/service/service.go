// Package service runs nri-hcn-portmap as a Windows service. The decisions
// (what to install, how to react to the service control manager) are
// portable and tested everywhere; only the SCM glue is in _windows.go.
package service

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Name of the Windows service.
const Name = "nri-hcn-portmap"

// RecoveryAction is what the SCM does after the service fails.
type RecoveryAction struct {
	Restart bool
	Delay   time.Duration
}

// Plan is everything `service install` registers.
type Plan struct {
	Name, DisplayName, Description string
	Exe                            string
	Args                           []string
	Dependencies                   []string
	Recovery                       []RecoveryAction
	ResetPeriod                    time.Duration // failure count resets after this long without failure
}

// InstallPlan builds the service registration for exe with the given
// configuration file. The configuration path must be absolute and exist:
// a service starts in System32, and a typo would only show at the next boot.
func InstallPlan(exe, configPath string) (Plan, error) {
	if !filepath.IsAbs(exe) {
		return Plan{}, fmt.Errorf("service install: executable %q: the path must be absolute", exe)
	}
	args := []string{"run"}
	if configPath != "" {
		if !filepath.IsAbs(configPath) && !strings.HasPrefix(configPath, `\\`) {
			return Plan{}, fmt.Errorf("service install: --config %q: the path must be absolute (a service starts in System32)", configPath)
		}
		if _, err := os.Stat(configPath); err != nil {
			return Plan{}, fmt.Errorf("service install: --config %q: %w", configPath, err)
		}
		args = append(args, "--config", configPath)
	}
	return Plan{
		Name:        Name,
		DisplayName: "NRI HCN port mappings",
		Description: "Gives containerd pod sandboxes HNS v2 PortMapping endpoints in their own HCN namespace.",
		Exe:         exe,
		Args:        args,
		// containerd must be there to read sandboxes from; HNS is a
		// system service that starts before both.
		Dependencies: []string{"containerd"},
		// Restart after 5 s, then 10 s, then every 30 s; forget failures
		// after a day without one.
		Recovery:    []RecoveryAction{{true, 5 * time.Second}, {true, 10 * time.Second}, {true, 30 * time.Second}},
		ResetPeriod: 24 * time.Hour,
	}, nil
}

// Request is a control request from the SCM.
type Request int

// Requests the service handles.
const (
	Interrogate Request = iota
	Stop
	Shutdown
	ParamChange // `sc control nri-hcn-portmap paramchange`: reload the configuration
)

// State is the service state reported to the SCM.
type State int

// States, in the order a service goes through them.
const (
	StartPending State = iota
	Running
	StopPending
	Stopped
)

func (s State) String() string {
	return [...]string{"start-pending", "running", "stop-pending", "stopped"}[s]
}

// RunFunc is the plugin's main job: it runs until ctx ends, then finishes or
// rolls back in-flight HCN work before returning.
type RunFunc func(ctx context.Context) error

// ProgressEvery is how often a stopping service tells the SCM it is still
// making progress (each StopPending report is the next checkpoint): the SCM
// gives up on a service whose checkpoint does not move within its wait hint.
const ProgressEvery = 2 * time.Second

// Handle drives run from SCM requests: it reports StartPending, Running;
// on Stop or Shutdown (and pre-shutdown) StopPending, repeated every
// ProgressEvery while run finishes its in-flight work, and Stopped.
// ParamChange calls reload. It returns the exit code the SCM sees: non-zero
// when run failed on its own, so the recovery actions restart the service.
func Handle(requests <-chan Request, report func(State), run RunFunc, reload func()) uint32 {
	return HandleWith(requests, report, run, reload, ProgressEvery)
}

// HandleWith is Handle with the interval of the stop progress reports.
func HandleWith(requests <-chan Request, report func(State), run RunFunc, reload func(), every time.Duration) uint32 {
	report(StartPending)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	state := Running
	report(state)
	for {
		select {
		case req, ok := <-requests:
			if !ok {
				req = Stop
			}
			switch req {
			case Interrogate:
				report(state)
			case ParamChange:
				if reload != nil {
					reload()
				}
			case Stop, Shutdown:
				state = StopPending
				report(state)
				cancel()
				err := waitReporting(done, every, func() { report(StopPending) })
				report(Stopped)
				if err != nil && !errors.Is(err, context.Canceled) {
					return 1
				}
				return 0
			}
		case <-done:
			// run ended without being asked to: a failure for the SCM
			report(Stopped)
			return 1
		}
	}
}

// waitReporting waits for run's result, calling progress every interval.
func waitReporting(done <-chan error, every time.Duration, progress func()) error {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case err := <-done:
			return err
		case <-t.C:
			progress()
		}
	}
}
