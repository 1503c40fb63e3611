package containerd

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	tasktypes "github.com/containerd/containerd/api/types/task"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/test/testfs"

	"github.com/Microsoft/hcsshim/cmd/containerd-shim-runhcs-v1/options"
	"google.golang.org/protobuf/proto"
)

// Regression (load and faults, 3): after Close the store reconnected on
// the next call, so work still running at shutdown opened a new client.
func TestClosedStoreDoesNotReconnect(t *testing.T) {
	s := NewStore(filepath.Join(testfs.TempDir(t), "containerd.sock"), "k8s.io")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if c, err := s.Client(); !errors.Is(err, ErrClosed) || c != nil {
		t.Fatalf("Client after Close = %v, %v; want ErrClosed", c, err)
	}
}

// A containerd that does not answer is containerd's failure (the core's
// table retries it and tells it as ContainerdUnavailable), for every read.
func TestContainerdNotAnsweringIsErrContainerd(t *testing.T) {
	s := NewStore(filepath.Join(testfs.TempDir(t), "containerd.sock"), "k8s.io")
	t.Cleanup(func() { _ = s.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err1 := s.Sandbox(ctx, "x")
	_, err2 := s.TaskState(ctx, "x")
	_, err3 := s.ListSandboxes(ctx)
	for i, err := range []error{err1, err2, err3} {
		if !errors.Is(err, plugin.ErrContainerd) {
			t.Errorf("read %d: %v, want plugin.ErrContainerd", i+1, err)
		}
	}
}

func TestNetNSFromSpec(t *testing.T) {
	tests := []struct{ spec, want string }{
		{`{"windows":{"network":{"networkNamespace":"0452913B-E445-438B-8922-374E5A15C9B4"}}}`, "0452913B-E445-438B-8922-374E5A15C9B4"},
		{`{"linux":{}}`, ""},
		{`{"windows":{}}`, ""},
	}
	for _, tt := range tests {
		if s, err := decodeSpec([]byte(tt.spec)); err != nil || s.netNS().String() != tt.want {
			t.Errorf("netNS of %s = %q, %v; want %q", tt.spec, s.netNS(), err, tt.want)
		}
	}
	if _, err := decodeSpec([]byte(`{`)); err == nil {
		t.Error("a broken spec decoded")
	}
}

func TestNetNSFromSpecIsCanonical(t *testing.T) {
	s, err := decodeSpec([]byte(`{"windows":{"network":{"networkNamespace":"{0452913b-e445-438b-8922-374e5a15c9b4}"}}}`))
	if got := s.netNS(); err != nil || got != "0452913B-E445-438B-8922-374E5A15C9B4" {
		t.Fatalf("= %q, %v", got, err)
	}
}

func TestHyperVIsolation(t *testing.T) {
	marshal := func(iso options.Options_SandboxIsolation) []byte {
		b, err := proto.Marshal(&options.Options{SandboxIsolation: iso, SandboxPlatform: "windows/amd64"})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	const runhcs = "containerd.runhcs.v1.Options"
	tests := []struct {
		name     string
		optsType string
		opts     []byte
		spec     string
		hyperV   bool
	}{
		{"runhcs options, HYPERVISOR", runhcs, marshal(options.Options_HYPERVISOR), `{"windows":{}}`, true},
		{"runhcs options as a full type URL", "type.googleapis.com/" + runhcs, marshal(options.Options_HYPERVISOR), "", true},
		{"runhcs options, PROCESS", runhcs, marshal(options.Options_PROCESS), `{"windows":{}}`, false},
		{"another runtime's options are not read", "io.containerd.runc.v2.Options", marshal(options.Options_HYPERVISOR), "", false},
		{"undecodable options", runhcs, []byte{0xff, 0xff}, "", false},
		{"spec Windows.HyperV", "", nil, `{"windows":{"hyperv":{}}}`, true},
		{"spec without HyperV", "", nil, `{"windows":{"network":{}}}`, false},
		{"no options, no spec", "", nil, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec, err := decodeSpec([]byte(tt.spec))
			if err != nil {
				t.Fatal(err)
			}
			got := hyperVIsolation(tt.optsType, tt.opts, spec)
			if (got != "") != tt.hyperV {
				t.Fatalf("hyperVIsolation = %q, want Hyper-V %v", got, tt.hyperV)
			}
		})
	}
}

func TestTaskStateOf(t *testing.T) {
	for _, tc := range []struct {
		status tasktypes.Status
		want   plugin.TaskState
	}{
		{tasktypes.Status_CREATED, plugin.TaskRunning},
		{tasktypes.Status_RUNNING, plugin.TaskRunning},
		{tasktypes.Status_PAUSING, plugin.TaskRunning},
		{tasktypes.Status_PAUSED, plugin.TaskRunning},
		{tasktypes.Status_STOPPED, plugin.TaskStopped},
		{tasktypes.Status_UNKNOWN, plugin.TaskUnknown},
	} {
		if got := TaskStateOf(tc.status); got != tc.want {
			t.Errorf("TaskStateOf(%v) = %v, want %v", tc.status, got, tc.want)
		}
	}
}
