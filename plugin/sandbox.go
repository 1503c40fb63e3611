package plugin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	tasksapi "github.com/containerd/containerd/api/services/tasks/v1"
	tasktypes "github.com/containerd/containerd/api/types/task"
	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/errdefs"
	"github.com/containerd/errdefs/pkg/errgrpc"
)

// Labels and extensions containerd's CRI puts on a sandbox container.
const (
	LabelKind         = "io.cri-containerd.kind"
	KindSandbox       = "sandbox"
	ExtensionMetadata = "io.cri-containerd.sandbox.metadata"
)

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
	IsSandbox bool   // labelled io.cri-containerd.kind=sandbox
	NetNS     string // spec Windows.Network.NetworkNamespace; "" when none
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

// ociSpec mirrors the few fields of the OCI runtime spec we read; the spec
// travels as JSON in containerd's Any.
type ociSpec struct {
	Windows *struct {
		Network *struct {
			NetworkNamespace string `json:"networkNamespace,omitempty"`
		} `json:"network,omitempty"`
	} `json:"windows,omitempty"`
}

// NetNSFromSpec returns Windows.Network.NetworkNamespace of a JSON OCI spec.
func NetNSFromSpec(spec []byte) (string, error) {
	var s ociSpec
	if err := json.Unmarshal(spec, &s); err != nil {
		return "", fmt.Errorf("decoding OCI spec: %w", err)
	}
	if s.Windows == nil || s.Windows.Network == nil {
		return "", nil
	}
	return s.Windows.Network.NetworkNamespace, nil
}

// ContainerdStore reads sandboxes from containerd over its API. The client
// connects on first use and reconnects after containerd restarts.
type ContainerdStore struct {
	address   string
	namespace string

	mu     sync.Mutex
	client *client.Client
}

var _ SandboxStore = (*ContainerdStore)(nil)

// NewContainerdStore returns a store for containerd at address, reading
// containers of the given containerd namespace (k8s.io for CRI).
func NewContainerdStore(address, namespace string) *ContainerdStore {
	return &ContainerdStore{address: address, namespace: namespace}
}

// Client returns a connected containerd client.
func (s *ContainerdStore) Client() (*client.Client, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.client != nil {
		return s.client, nil
	}
	c, err := client.New(s.address, client.WithDefaultNamespace(s.namespace), client.WithTimeout(5*time.Second))
	if err != nil {
		return nil, fmt.Errorf("connecting to containerd at %s: %w", s.address, err)
	}
	s.client = c
	return c, nil
}

// Namespace is the containerd namespace read.
func (s *ContainerdStore) Namespace() string { return s.namespace }

// Close closes the client.
func (s *ContainerdStore) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.client == nil {
		return nil
	}
	err := s.client.Close()
	s.client = nil
	return err
}

// Sandbox implements SandboxStore.
func (s *ContainerdStore) Sandbox(ctx context.Context, id string) (*SandboxInfo, error) {
	c, err := s.Client()
	if err != nil {
		return nil, err
	}
	ctx = namespaces.WithNamespace(ctx, s.namespace)
	info, err := c.ContainerService().Get(ctx, id)
	if errdefs.IsNotFound(err) {
		return nil, fmt.Errorf("container %s in containerd namespace %s: %w", id, s.namespace, ErrSandboxNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("reading container %s from containerd: %w", id, err)
	}
	out := &SandboxInfo{ID: id, IsSandbox: info.Labels[LabelKind] == KindSandbox}
	if info.Spec != nil {
		if out.NetNS, err = NetNSFromSpec(info.Spec.GetValue()); err != nil {
			return nil, fmt.Errorf("container %s: %w", id, err)
		}
	}
	if ext, ok := info.Extensions[ExtensionMetadata]; ok && ext != nil {
		out.Metadata = ext.GetValue()
	}
	return out, nil
}

// TaskState implements SandboxStore.
func (s *ContainerdStore) TaskState(ctx context.Context, id string) (TaskState, error) {
	c, err := s.Client()
	if err != nil {
		return TaskUnknown, err
	}
	ctx = namespaces.WithNamespace(ctx, s.namespace)
	resp, err := c.TaskService().Get(ctx, &tasksapi.GetRequest{ContainerID: id})
	if errdefs.IsNotFound(errgrpc.ToNative(err)) {
		return TaskUnknown, nil
	}
	if err != nil {
		return TaskUnknown, fmt.Errorf("reading task of %s from containerd: %w", id, err)
	}
	switch resp.GetProcess().GetStatus() {
	case tasktypes.Status_RUNNING, tasktypes.Status_CREATED, tasktypes.Status_PAUSED, tasktypes.Status_PAUSING:
		return TaskRunning, nil
	case tasktypes.Status_STOPPED:
		return TaskStopped, nil
	}
	return TaskUnknown, nil
}

// ListSandboxes implements SandboxStore.
func (s *ContainerdStore) ListSandboxes(ctx context.Context) ([]string, error) {
	c, err := s.Client()
	if err != nil {
		return nil, err
	}
	ctx = namespaces.WithNamespace(ctx, s.namespace)
	list, err := c.ContainerService().List(ctx, fmt.Sprintf("labels.%q==%s", LabelKind, KindSandbox))
	if err != nil {
		return nil, fmt.Errorf("listing sandboxes in containerd: %w", err)
	}
	ids := make([]string, 0, len(list))
	for _, ctr := range list {
		ids = append(ids, ctr.ID)
	}
	return ids, nil
}
