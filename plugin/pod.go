package plugin

import (
	"context"
	"errors"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
)

// Pod is what an event source knows of a pod sandbox.
type Pod struct {
	ID          string // sandbox ID = containerd container ID
	Name        string
	Namespace   string // Kubernetes namespace
	UID         string
	Annotations map[string]string
	Labels      map[string]string
	// RuntimeHandler is the CRI runtime handler (e.g. runhcs-wcow-hypervisor).
	RuntimeHandler string
	// Partial: only the ID is known (a containerd event, a resync, an
	// orphan); name, namespace and annotations are read from containerd's
	// CRI sandbox metadata.
	Partial bool
}

// holderName is how the pod is named to another pod that asks for its
// host ports: namespace/name, "" when the name is not known.
func (p Pod) holderName() string {
	if p.Name == "" {
		return ""
	}
	return p.Namespace + "/" + p.Name
}

func (p Pod) String() string {
	if p.Name == "" {
		return "sandbox " + p.ID
	}
	return p.Namespace + "/" + p.Name
}

// ErrNotSandbox: a container event or listing named an application
// container, not a CRI sandbox; there is nothing to do for it.
var ErrNotSandbox = errors.New("not a CRI sandbox container")

// ErrInvalidPod wraps errors caused by the pod's own request (a bad
// annotation, a hostPort HNS cannot honour): retrying will not help.
var ErrInvalidPod = errors.New("invalid pod request")

// Inputs says where port mappings come from.
type Inputs struct {
	Annotations bool // the hcn.nri.io/port-mappings annotation
	CRI         bool // Kubernetes hostPort, from containerd's CRI sandbox metadata
}

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
