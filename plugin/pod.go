package plugin

import (
	"context"
	"errors"
	"fmt"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/request"
)

// Pod is what an event source knows of a pod sandbox (what it asks for
// is package request's to resolve).
type Pod = request.Pod

// ErrNotSandbox: a container event or listing named an application
// container, not a CRI sandbox; there is nothing to do for it.
var ErrNotSandbox = errors.New("not a CRI sandbox container")

// ErrInvalidPod wraps errors caused by the pod's own request (a bad
// annotation, a hostPort HNS cannot honour): retrying will not help.
var ErrInvalidPod = request.ErrInvalid

// ErrHyperV: the pod is Hyper-V isolated; host ports cannot be added to it.
// It is an invalid request (final).
var ErrHyperV = fmt.Errorf("%w: Hyper-V isolated pod", ErrInvalidPod)

// Inputs says where port mappings come from.
type Inputs = request.Sources

// ErrSandboxNotFound: containerd has no container with that ID.
var ErrSandboxNotFound = errors.New("sandbox not found in containerd")

// TaskState is what containerd says of a sandbox's task.
type TaskState int

// Task states.
const (
	TaskUnknown TaskState = iota // no task, or containerd could not tell
	TaskRunning
	TaskStopped
)

// SandboxInfo is what the plugin reads of a sandbox container.
type SandboxInfo struct {
	ID        string
	IsSandbox bool     // labelled io.cri-containerd.kind=sandbox
	NetNS     hcn.GUID // spec Windows.Network.NetworkNamespace; "" when none
	// HyperV says why the sandbox is Hyper-V isolated ("" when it is
	// process-isolated): its utility VM takes the namespace's endpoints
	// once, at creation, so an endpoint added later never reaches it.
	HyperV string
	// Metadata is the raw io.cri-containerd.sandbox.metadata extension.
	Metadata []byte
}

// SandboxStore reads sandboxes; the seam over the containerd process.
type SandboxStore interface {
	// Sandbox returns ErrSandboxNotFound when the container does not exist.
	Sandbox(ctx context.Context, id string) (*SandboxInfo, error)
	TaskState(ctx context.Context, id string) (TaskState, error)
	// ListSandboxes returns the IDs of every CRI sandbox container.
	ListSandboxes(ctx context.Context) ([]string, error)
}
