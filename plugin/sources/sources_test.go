package sources

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/config"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn/hcnsim"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/containerd"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/test/testfs"
)

// On Windows auto means containerd's events at once: no NRI is tried (NRI
// is nil here, so touching it would panic) and nothing waits for it.
func TestAutoOnWindowsFollowsContainerdEventsAtOnce(t *testing.T) {
	log := logrus.NewEntry(logrus.New())
	store := containerd.NewStore(filepath.Join(testfs.TempDir(t), "no-containerd.sock"), "k8s.io")
	core := plugin.NewCore(hcn.NewManager(hcnsim.New(), plugin.ManagerConfig(config.Default().HCN)), store, plugin.Options{}, log)
	defer core.Close()
	chosen := make(chan string, 1)
	s := &Sources{Mode: config.SourceAuto, EventsOnly: true, Log: log,
		Events: containerd.NewEventSource(core, store, plugin.NewResyncer(core, 0, log), time.Second, log),
		// a socket that exists: without EventsOnly, auto would try NRI
		NRISocketExists: func() bool { return true }, RegistrationWait: time.Hour,
		Chosen: func(source string) { chosen <- source }}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	if got := <-chosen; got != config.SourceContainerd {
		t.Fatalf("chose %q", got)
	}
	if err := s.Health(ctx); err == nil {
		t.Error("healthy without a live subscription")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
