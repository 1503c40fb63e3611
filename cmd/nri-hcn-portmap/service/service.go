// Package service runs nri-hcn-portmap as a Windows service. The decisions
// (what to install, how to react to the service control manager) are
// portable and tested everywhere; only the SCM glue is in _windows.go.
package service

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/config"
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
// configuration file and the services it depends on (none by default: the
// plugin retries containerd itself, and RKE2 and others run containerd
// under their own service). The configuration path must be absolute and
// exist: a service starts in System32, and a typo would only show at the
// next boot. Each dependency must be an installed service (exists says),
// or the start would fail with error 1075.
func InstallPlan(exe, configPath string, dependsOn []string, exists func(service string) bool) (Plan, error) {
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
	for _, d := range dependsOn {
		if !exists(d) {
			return Plan{}, fmt.Errorf("service install: --depends-on %q: no service of that name is installed", d)
		}
	}
	return Plan{
		Name:         Name,
		DisplayName:  "NRI HCN port mappings",
		Description:  "Gives containerd pod sandboxes HNS v2 PortMapping endpoints in their own HCN namespace.",
		Exe:          exe,
		Args:         args,
		Dependencies: dependsOn,
		// Restart after each of config.ServiceRecovery's delays (the
		// last repeats); forget failures after a day without one.
		Recovery:    recovery(),
		ResetPeriod: config.ServiceRecoveryReset,
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
const ProgressEvery = config.ServiceProgressEvery

// recovery is the SCM's restarts after failures, config.ServiceRecovery's.
func recovery() []RecoveryAction {
	var out []RecoveryAction
	for _, d := range config.ServiceRecovery() {
		out = append(out, RecoveryAction{Restart: true, Delay: d})
	}
	return out
}

// Handle drives run from SCM requests: it reports StartPending, Running;
// on Stop or Shutdown (and pre-shutdown) StopPending, repeated every
// ProgressEvery while run finishes its in-flight work. It does not report
// Stopped: the SCM glue does, once, with the exit code Handle returns, so
// the SCM never sees a clean stop before the real code. The code is 0 after
// an operator's stop (a failure to finish is logged by run; a non-zero code
// would make the recovery actions restart a service someone stopped), and
// non-zero when run ended on its own, so the recovery actions restart it.
// ParamChange calls reload.
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
				_ = waitReporting(done, every, func() { report(StopPending) })
				return 0
			}
		case <-done:
			return 1 // run ended without being asked to: a failure for the SCM
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
