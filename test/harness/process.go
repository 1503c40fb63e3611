// Child processes (containerd, the simulator, the plugin) and their logs.

package harness

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// Process is a child process with its log file.
type Process struct {
	Name string
	Log  string
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

func start(name, logPath, bin string, args ...string) (*Process, error) {
	return startEnv(nil, name, logPath, bin, args...)
}

// startEnv is start with env added to the process's environment.
func startEnv(env []string, name, logPath, bin string, args ...string) (*Process, error) {
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &Process{Name: name, Log: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	return p, nil
}

// Exited says how the process ended, as its exit status or the signal
// that ended it ("exit status 1", "signal: killed"); "" while it runs.
func (p *Process) Exited() string {
	if p.Running() {
		return ""
	}
	if p.cmd.ProcessState == nil {
		return fmt.Sprint(p.err)
	}
	return p.cmd.ProcessState.String()
}

// Gone describes the process when it has ended: its exit status or signal
// and the end of its log, for an error message; "" while it runs.
func (p *Process) Gone() string {
	how := p.Exited()
	if how == "" {
		return ""
	}
	return fmt.Sprintf("%s process is gone (%s); the end of its log:\n%s", p.Name, how, p.Tail(30))
}

// Wait waits until the process has exited, or ctx ends.
func (p *Process) Wait(ctx context.Context) error {
	select {
	case <-p.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// PID is the process ID.
func (p *Process) PID() int { return p.cmd.Process.Pid }

// Running reports whether the process has not exited.
func (p *Process) Running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// Kill sends SIGKILL (a crash) and waits for the exit.
func (p *Process) Kill() { p.signal(syscall.SIGKILL) }

// Stop sends SIGTERM and waits up to 10 s, then kills.
func (p *Process) Stop() {
	p.signal(syscall.SIGTERM)
}

func (p *Process) signal(sig syscall.Signal) {
	if !p.Running() {
		return
	}
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// Tail returns the last n lines of the process log.
func (p *Process) Tail(n int) string {
	b, _ := os.ReadFile(p.Log)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
