package main

import (
	"context"
	"errors"
	"os"
	"strings"
	"unsafe"

	"github.com/sirupsen/logrus"
	"golang.org/x/sys/windows"
)

// stopWithWrapper ends ctx when the process that wraps the plugin in a
// HostProcess container exits. With the bind filter hcsshim runs the
// container's command line through "cmd /c" (internal/jobcontainers
// jobcontainer.go, CreateProcess), so the container's init process is that
// cmd.exe: a stop that targets the init process (killing it, or a console
// event sent to it alone) reaches the wrapper, not the plugin. The plugin
// then stops as it would on its own stop signal: in-flight work finishes
// or is left to the next start, within plugin.shutdown_grace. Outside a
// HostProcess container (no CONTAINER_SANDBOX_MOUNT_POINT), or when the
// parent is not cmd.exe, nothing changes.
func stopWithWrapper(ctx context.Context, log *logrus.Entry) context.Context {
	if os.Getenv("CONTAINER_SANDBOX_MOUNT_POINT") == "" {
		return ctx
	}
	pid, exe, err := parentOf(uint32(os.Getpid()))
	if err != nil || !strings.EqualFold(exe, "cmd.exe") {
		return ctx
	}
	exited, err := processExit(pid)
	if err != nil {
		log.WithError(err).Warn("cannot watch the HostProcess command wrapper (cmd.exe); a stop may reach it and not the plugin")
		return ctx
	}
	ctx, cancel := context.WithCancelCause(ctx)
	go func() {
		select {
		case <-exited:
			log.WithField("wrapper_pid", pid).Info("the HostProcess command wrapper (cmd /c) exited: stopping")
			cancel(errors.New("the HostProcess command wrapper (cmd /c) exited"))
		case <-ctx.Done():
		}
	}()
	return ctx
}

// parentOf is the parent process of pid and its executable's name.
func parentOf(pid uint32) (uint32, string, error) {
	snap, err := windows.CreateToolhelp32Snapshot(windows.TH32CS_SNAPPROCESS, 0)
	if err != nil {
		return 0, "", err
	}
	defer windows.CloseHandle(snap)
	procs := map[uint32]windows.ProcessEntry32{}
	e := windows.ProcessEntry32{Size: uint32(unsafe.Sizeof(windows.ProcessEntry32{}))}
	for err = windows.Process32First(snap, &e); err == nil; err = windows.Process32Next(snap, &e) {
		procs[e.ProcessID] = e
	}
	self, ok := procs[pid]
	if !ok {
		return 0, "", errors.New("this process is not in the process list")
	}
	parent, ok := procs[self.ParentProcessID]
	if !ok {
		return self.ParentProcessID, "", errors.New("the parent process is gone")
	}
	return parent.ProcessID, windows.UTF16ToString(parent.ExeFile[:]), nil
}

// processExit is closed when process pid exits.
func processExit(pid uint32) (<-chan struct{}, error) {
	h, err := windows.OpenProcess(windows.SYNCHRONIZE, false, pid)
	if err != nil {
		return nil, err
	}
	done := make(chan struct{})
	go func() {
		defer windows.CloseHandle(h)
		_, _ = windows.WaitForSingleObject(h, windows.INFINITE)
		close(done)
	}()
	return done, nil
}
