// Package containerd is everything the plugin reads from containerd: the
// sandbox store (a sandbox's namespace GUID, CRI metadata and task state,
// and the list of sandboxes) and the event source that follows containerd's
// event stream, which stock containerd emits on Windows although it sends no
// NRI pod events there.
package containerd

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/config"
	"strings"
	"sync"

	"github.com/Microsoft/hcsshim/cmd/containerd-shim-runhcs-v1/options"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"

	tasksapi "github.com/containerd/containerd/api/services/tasks/v1"
	tasktypes "github.com/containerd/containerd/api/types/task"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/errdefs"
	"github.com/containerd/errdefs/pkg/errgrpc"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/request"
)

// Labels and extensions containerd's CRI puts on a sandbox container.
const (
	LabelKind   = "io.cri-containerd.kind"
	KindSandbox = "sandbox"
)

// ociSpec mirrors the few fields of the OCI runtime spec we read; the spec
// travels as JSON in containerd's Any.
type ociSpec struct {
	Windows *struct {
		Network *struct {
			NetworkNamespace string `json:"networkNamespace,omitempty"`
		} `json:"network,omitempty"`
		HyperV *struct{} `json:"hyperv,omitempty"`
	} `json:"windows,omitempty"`
}

// decodeSpec decodes a JSON OCI spec once for everything read from it; an
// empty spec is the zero ociSpec.
func decodeSpec(spec []byte) (ociSpec, error) {
	var s ociSpec
	if len(spec) == 0 {
		return s, nil
	}
	if err := json.Unmarshal(spec, &s); err != nil {
		return s, fmt.Errorf("decoding OCI spec: %w", err)
	}
	return s, nil
}

// netNS returns Windows.Network.NetworkNamespace, "" when there is none.
func (s ociSpec) netNS() hcn.GUID {
	if s.Windows == nil || s.Windows.Network == nil {
		return ""
	}
	return hcn.ParseGUID(s.Windows.Network.NetworkNamespace)
}

// runhcsOptionsType is the type URL of runhcs's runtime options in a
// container record.
const runhcsOptionsType = "containerd.runhcs.v1.Options"

// hyperVIsolation tells a Hyper-V isolated sandbox from its container
// record: runhcs's runtime options (SandboxIsolation HYPERVISOR, where
// containerd keeps what the runtime handler configured) or Windows.HyperV
// in the spec. It returns why, "" for a process-isolated sandbox.
func hyperVIsolation(optsType string, opts []byte, spec ociSpec) string {
	if strings.HasSuffix(optsType, runhcsOptionsType) && len(opts) > 0 {
		var o options.Options
		if err := proto.Unmarshal(opts, &o); err == nil && o.GetSandboxIsolation() == options.Options_HYPERVISOR {
			return "runhcs runtime options: SandboxIsolation HYPERVISOR"
		}
	}
	if spec.Windows != nil && spec.Windows.HyperV != nil {
		return "OCI spec: Windows.HyperV is set"
	}
	return ""
}

// Store reads sandboxes from containerd over its API. The client
// connects on first use and reconnects after containerd restarts.
type Store struct {
	address   string
	namespace string

	mu     sync.Mutex
	client *client.Client
	closed bool
}

// ErrClosed: the store was closed; it does not connect again (the plugin
// is stopping: plugin.ErrClosed).
var ErrClosed = fmt.Errorf("containerd store closed: %w", plugin.ErrClosed)

var _ plugin.SandboxStore = (*Store)(nil)

// NewStore returns a store for containerd at address, reading
// containers of the given containerd namespace (k8s.io for CRI).
func NewStore(address, namespace string) *Store {
	return &Store{address: address, namespace: namespace}
}

// Client returns a connected containerd client.
func (s *Store) Client() (*client.Client, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	if s.client != nil {
		return s.client, nil
	}
	c, err := dial(s.address, s.namespace)
	if err != nil {
		return nil, fmt.Errorf("connecting to containerd at %s: %w: %w", s.address, plugin.ErrContainerd, err)
	}
	s.client = c
	return c, nil
}

// dial connects to containerd at its socket or named pipe or, only when
// configured so, at a loopback tcp:// address: a relay to containerd's
// socket, without authentication, for rigs such as wine, whose named pipes
// go-winio cannot use (containerd's own [grpc] tcp_address serves none of
// the services the plugin uses).
func dial(address, namespace string) (*client.Client, error) {
	hostport, ok := strings.CutPrefix(address, "tcp://")
	if !ok {
		return client.New(address, client.WithDefaultNamespace(namespace), client.WithTimeout(config.ContainerdCallTimeout))
	}
	conn, err := grpc.NewClient("passthrough:///"+hostport, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(16<<20), grpc.MaxCallSendMsgSize(16<<20)))
	if err != nil {
		return nil, err
	}
	return client.NewWithConn(conn, client.WithDefaultNamespace(namespace))
}

// Ping reports whether containerd answers.
func (s *Store) Ping(ctx context.Context) error {
	c, err := s.Client()
	if err != nil {
		return err
	}
	_, err = c.Version(ctx)
	return err
}

// Version is containerd's version.
func (s *Store) Version(ctx context.Context) (string, error) {
	c, err := s.Client()
	if err != nil {
		return "", err
	}
	v, err := c.Version(ctx)
	return v.Version, err
}

// Namespace is the containerd namespace read.
func (s *Store) Namespace() string { return s.namespace }

// Close closes the client; the store does not connect again.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	if s.client == nil {
		return nil
	}
	err := s.client.Close()
	s.client = nil
	return err
}

// Sandbox implements plugin.SandboxStore.
func (s *Store) Sandbox(ctx context.Context, id string) (*plugin.SandboxInfo, error) {
	c, err := s.Client()
	if err != nil {
		return nil, err
	}
	ctx = namespaces.WithNamespace(ctx, s.namespace)
	info, err := c.ContainerService().Get(ctx, id)
	if errdefs.IsNotFound(err) {
		return nil, fmt.Errorf("container %s in containerd namespace %s: %w", id, s.namespace, plugin.ErrSandboxNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("reading container %s from containerd: %w: %w", id, plugin.ErrContainerd, err)
	}
	out := &plugin.SandboxInfo{ID: id, IsSandbox: info.Labels[LabelKind] == KindSandbox}
	spec, err := decodeSpec(info.Spec.GetValue())
	if err != nil {
		return nil, fmt.Errorf("container %s: %w", id, err)
	}
	out.NetNS = spec.netNS()
	out.HyperV = hyperVIsolation(info.Runtime.Options.GetTypeUrl(), info.Runtime.Options.GetValue(), spec)
	if ext, ok := info.Extensions[request.ExtensionMetadata]; ok && ext != nil {
		out.Metadata = ext.GetValue()
	}
	return out, nil
}

// TaskState implements plugin.SandboxStore.
func (s *Store) TaskState(ctx context.Context, id string) (plugin.TaskState, error) {
	c, err := s.Client()
	if err != nil {
		return plugin.TaskUnknown, err
	}
	ctx = namespaces.WithNamespace(ctx, s.namespace)
	resp, err := c.TaskService().Get(ctx, &tasksapi.GetRequest{ContainerID: id})
	if errdefs.IsNotFound(errgrpc.ToNative(err)) {
		return plugin.TaskUnknown, nil
	}
	if err != nil {
		return plugin.TaskUnknown, fmt.Errorf("reading task of %s from containerd: %w: %w", id, plugin.ErrContainerd, err)
	}
	return TaskStateOf(resp.GetProcess().GetStatus()), nil
}

// TaskStateOf is what a containerd task status says of a sandbox: created,
// running or paused tasks are live, a stopped one is not, and anything else
// (unknown) leaves it to HCN (does the namespace exist).
func TaskStateOf(s tasktypes.Status) plugin.TaskState {
	switch s {
	case tasktypes.Status_RUNNING, tasktypes.Status_CREATED, tasktypes.Status_PAUSED, tasktypes.Status_PAUSING:
		return plugin.TaskRunning
	case tasktypes.Status_STOPPED:
		return plugin.TaskStopped
	}
	return plugin.TaskUnknown
}

// ListSandboxes implements plugin.SandboxStore.
func (s *Store) ListSandboxes(ctx context.Context) ([]string, error) {
	c, err := s.Client()
	if err != nil {
		return nil, err
	}
	ctx = namespaces.WithNamespace(ctx, s.namespace)
	list, err := c.ContainerService().List(ctx, fmt.Sprintf("labels.%q==%s", LabelKind, KindSandbox))
	if err != nil {
		return nil, fmt.Errorf("listing sandboxes in containerd: %w: %w", plugin.ErrContainerd, err)
	}
	ids := make([]string, 0, len(list))
	for _, ctr := range list {
		ids = append(ids, ctr.ID)
	}
	return ids, nil
}
