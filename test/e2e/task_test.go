package e2e

import (
	"context"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/containerd/v2/pkg/oci"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/containerd"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/test/harness"
)

// TestRealTaskStates: a sandbox container with a real task (the pause
// program under runc), read through the plugin's store and judged by the
// plugin's resync. A running task keeps the endpoint; once the task is
// stopped, the resync removes the endpoint although the HCN namespace is
// still there (containerd tears it down last); a deleted task is unknown to
// containerd, and then the namespace decides.
func TestRealTaskStates(t *testing.T) {
	if _, err := exec.LookPath("runc"); err != nil {
		t.Fatalf("runc is needed (apt-get install runc; .ci/run installs it): %v", err)
	}
	env, ctx := newEnv(t, strings.Replace(eventsConfig, `resync_interval = "0s"`, `resync_interval = "200ms"`, 1))
	if err := env.ImportPauseImage(ctx); err != nil {
		t.Fatal(err)
	}
	p := pod("real-task", "18700:80")
	guid, err := env.SimClient.CreateNamespace(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	meta, err := p.CRIMetadata(guid.String())
	if err != nil {
		t.Fatal(err)
	}
	cctx := namespaces.WithNamespace(ctx, harness.K8s)
	img, err := env.Ctr.GetImage(cctx, harness.PauseImage)
	if err != nil {
		t.Fatal(err)
	}
	withNetNS := func(_ context.Context, _ oci.Client, _ *containers.Container, s *oci.Spec) error {
		s.Windows = &specs.Windows{Network: &specs.WindowsNetwork{NetworkNamespace: guid.String()}} // runc ignores it
		return nil
	}
	ctr, err := env.Ctr.NewContainer(cctx, p.ID,
		client.WithContainerLabels(map[string]string{containerd.LabelKind: containerd.KindSandbox}),
		client.WithNewSnapshot(p.ID+"-snapshot", img),
		client.WithNewSpec(oci.WithImageConfig(img), oci.WithProcessArgs("/pause"), withNetNS),
		harness.WithCRIMetadata(meta))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ctr.Delete(context.WithoutCancel(cctx), client.WithSnapshotCleanup) })
	task, err := ctr.NewTask(cctx, cio.NullIO)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = task.Delete(context.WithoutCancel(cctx), client.WithProcessKill) })
	if err := task.Start(cctx); err != nil {
		t.Fatal(err)
	}
	store := containerd.NewStore(env.CtrAddress, harness.K8s)
	t.Cleanup(func() { store.Close() })
	wantState := func(want plugin.TaskState) {
		t.Helper()
		if got, err := store.TaskState(ctx, p.ID); err != nil || got != want {
			t.Fatalf("TaskState = %v, %v; want %v", got, err, want)
		}
	}
	wantState(plugin.TaskRunning)

	// NRI as the source (the runtime side lists no pods): containerd's task
	// events do not reach the plugin, only its periodic resync sees the task
	if err := env.StartPlugin(ctx, "--source", "nri"); err != nil {
		t.Fatal(err)
	}
	wantEndpoint(t, ctx, env, p.ID, guid, []hcn.PortMappingPolicy{tcp(18700, 80, "", 1)})
	if err := harness.Consistently(ctx, time.Second, func() error { // resync after resync keeps it
		if endpointOf(t, ctx, env, p.ID) == nil {
			t.Fatal("a resync removed the endpoint of a running task")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	exited, err := task.Wait(cctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := task.Kill(cctx, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-exited
	wantState(plugin.TaskStopped)
	wantNoEndpoint(t, ctx, env, p.ID) // the resync judged the stopped task

	if _, err := task.Delete(cctx); err != nil {
		t.Fatal(err)
	}
	wantState(plugin.TaskUnknown)
}
