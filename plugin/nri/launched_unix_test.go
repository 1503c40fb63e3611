//go:build !windows

package nri

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/sirupsen/logrus"
)

// TestLaunchedSourceEndsWhenTheRuntimeCloses: a launched plugin's one
// connection closing ends Run with ErrRuntimeGone (the process then exits
// non-zero); a second Run, the sources', returns the same.
func TestLaunchedSourceEndsWhenTheRuntimeCloses(t *testing.T) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	syscall.Close(fds[1]) // the runtime is gone
	t.Setenv(api.PluginSocketEnvVar, strconv.Itoa(fds[0]))
	t.Setenv(api.PluginNameEnvVar, "hcn-portmap")
	t.Setenv(api.PluginIdxEnvVar, "10")
	var events []string
	src := NewSource(nil, Config{Launched: true, Registered: func(p, m string, on bool) { events = append(events, fmt.Sprint(p, m, on)) }},
		logrus.NewEntry(logrus.New()))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err = src.Run(ctx)
	if !errors.Is(err, ErrRuntimeGone) || !strings.Contains(err.Error(), "10-hcn-portmap") {
		t.Fatalf("Run = %v, want ErrRuntimeGone naming 10-hcn-portmap", err)
	}
	if again := src.Run(ctx); !errors.Is(again, ErrRuntimeGone) {
		t.Fatalf("second Run = %v", again)
	}
	if len(events) != 0 {
		t.Errorf("registered without a runtime: %v", events)
	}
}
