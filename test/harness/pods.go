// Pod sandboxes as containerd's CRI creates them, and the NRI pod lifecycle.

package harness

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/Microsoft/hcsshim/cmd/containerd-shim-runhcs-v1/options"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/containerd/v2/pkg/oci"
	"github.com/containerd/nri/pkg/api"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/containerd"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/request"
	"github.com/opencontainers/runtime-spec/specs-go"
	"google.golang.org/protobuf/types/known/anypb"
)

// Pod describes a sandbox to create.
type Pod struct {
	ID, Name, Namespace, UID string
	Annotations              map[string]string
	// Labels are the pod's labels (what NetworkPolicies select by), in
	// the CRI config, the NRI pod and the pod object
	Labels map[string]string
	// HostPorts are the CRI port mappings (Kubernetes hostPort) stored in
	// the sandbox metadata.
	HostPorts []*runtimeapi.PortMapping
	// NoWindowsNamespace makes a sandbox without Windows.Network (a Linux
	// or HostProcess sandbox).
	NoWindowsNamespace bool
	// HyperV stores runhcs options with SandboxIsolation HYPERVISOR in the
	// container record, as containerd does for a Hyper-V runtime handler.
	HyperV bool
	// RuntimeHandler is the CRI runtime handler, in the metadata and the
	// NRI pod.
	RuntimeHandler string
	// DNS is the pod's DNS configuration as kubelet gives it (nil: none).
	DNS *runtimeapi.DNSConfig
	// CNIDNS puts FakeCNIDNS in the record's CNIResult, as containerd's
	// CRI keeps the result of a CNI that reported DNS for the pod.
	CNIDNS bool
	// RawMetadata, when set, is the sandbox's CRI metadata extension as
	// is (one a real containerd's CRI wrote), instead of CRIMetadata's.
	RawMetadata []byte
}

// ClusterDNS is the DNS configuration kubelet gives a pod of namespace ns
// with the default dnsPolicy (ClusterFirst): the cluster's resolver and its
// search list.
func ClusterDNS(ns string) *runtimeapi.DNSConfig {
	return &runtimeapi.DNSConfig{Servers: []string{"10.96.0.10"},
		Searches: []string{ns + ".svc.cluster.local", "svc.cluster.local", "cluster.local"}, Options: []string{"ndots:5"}}
}

// criMetadataTypeURL is the type URL containerd's CRI stores the sandbox
// metadata extension under.
const criMetadataTypeURL = "github.com/containerd/cri/pkg/store/sandbox/Metadata"

// CRIMetadata encodes the io.cri-containerd.sandbox.metadata extension the
// way containerd does: encoding/json over its versioned Metadata struct,
// whose Config is the CRI PodSandboxConfig.
func (p Pod) CRIMetadata(netnsPath string) ([]byte, error) {
	type metadata struct {
		ID             string
		Name           string
		Config         *runtimeapi.PodSandboxConfig
		NetNSPath      string
		IP             string
		AdditionalIPs  []string
		RuntimeHandler string
		CNIResult      any
		ProcessLabel   string
	}
	var cni any
	if p.CNIDNS {
		// go-cni's Result as encoding/json writes it: an interface, and
		// one DNS entry per network in the CNI spec's types.DNS
		servers, search := FakeCNIDNS()
		cni = map[string]any{"Interfaces": map[string]any{"eth0": map[string]any{"IPConfigs": []any{map[string]any{"IP": "10.22.0.9"}}}},
			"DNS": []any{map[string]any{"nameservers": servers, "search": search}}, "Routes": nil}
	}
	return json.Marshal(struct {
		Version  string
		Metadata metadata
	}{"v1", metadata{
		ID:             p.ID,
		Name:           strings.Join([]string{p.Name, p.Namespace, p.UID, "0"}, "_"),
		NetNSPath:      netnsPath,
		RuntimeHandler: p.RuntimeHandler,
		CNIResult:      cni,
		Config: &runtimeapi.PodSandboxConfig{
			Metadata:     &runtimeapi.PodSandboxMetadata{Name: p.Name, Uid: p.UID, Namespace: p.Namespace},
			Annotations:  p.Annotations,
			Labels:       p.Labels,
			PortMappings: p.HostPorts,
			DnsConfig:    p.DNS,
		},
	}})
}

// NRIPod is the pod as the NRI runtime side reports it.
func (p Pod) NRIPod() *api.PodSandbox {
	return &api.PodSandbox{Id: p.ID, Name: p.Name, Namespace: p.Namespace, Uid: p.UID, Annotations: p.Annotations,
		Labels: p.Labels, RuntimeHandler: p.RuntimeHandler}
}

// RunRequest is the NRI RunPodSandbox request for p.
func RunRequest(p Pod) *api.RunPodSandboxRequest { return &api.RunPodSandboxRequest{Pod: p.NRIPod()} }

// CreateSandbox does what containerd's CRI does on Windows before any plugin
// hears of the pod: create the pod's HCN namespace, then the sandbox
// container whose spec names it. It returns the namespace GUID ("" for a
// sandbox without one).
func (e *Env) CreateSandbox(ctx context.Context, p Pod) (hcn.GUID, error) {
	spec := &oci.Spec{Version: specs.Version}
	var guid hcn.GUID
	if !p.NoWindowsNamespace {
		var err error
		if guid, err = e.SimClient.CreateNamespace(ctx, ""); err != nil {
			return "", err
		}
		spec.Windows = &specs.Windows{Network: &specs.WindowsNetwork{NetworkNamespace: guid.String()}}
	}
	var runtimeOpts any
	if p.HyperV {
		runtimeOpts = &options.Options{SandboxIsolation: options.Options_HYPERVISOR}
	}
	opts := []client.NewContainerOpts{
		client.WithContainerLabels(map[string]string{containerd.LabelKind: containerd.KindSandbox}),
		client.WithSpec(spec),
		client.WithRuntime("io.containerd.runhcs.v1", runtimeOpts),
	}
	meta, err := p.CRIMetadata(guid.String())
	if err != nil {
		return "", err
	}
	if p.RawMetadata != nil {
		meta = p.RawMetadata
	}
	opts = append(opts, WithCRIMetadata(meta))
	if _, err := e.Ctr.NewContainer(namespaces.WithNamespace(ctx, K8s), p.ID, opts...); err != nil {
		return "", fmt.Errorf("creating sandbox container %s: %w", p.ID, err)
	}
	return guid, nil
}

// WithCRIMetadata gives a container the CRI sandbox metadata extension, as
// containerd's CRI does.
func WithCRIMetadata(meta []byte) client.NewContainerOpts {
	return client.WithContainerExtension(request.ExtensionMetadata, &anypb.Any{TypeUrl: criMetadataTypeURL, Value: meta})
}

// RunPod creates the sandbox and sends RunPodSandbox, as containerd does.
func (e *Env) RunPod(ctx context.Context, p Pod) (hcn.GUID, error) {
	guid, err := e.AddPodSilently(ctx, p)
	if err != nil {
		return "", err
	}
	if err := e.NRI.RunPodSandbox(ctx, RunRequest(p)); err != nil {
		// containerd tears a failed sandbox down at once
		_ = e.StopPod(ctx, p, guid)
		_ = e.RemovePod(ctx, p)
		return guid, err
	}
	return guid, nil
}

// StopPod sends StopPodSandbox, then deletes the HCN namespace as
// containerd's CNI teardown does.
func (e *Env) StopPod(ctx context.Context, p Pod, guid hcn.GUID) error {
	err := e.NRI.StopPodSandbox(ctx, &api.StopPodSandboxRequest{Pod: p.NRIPod()})
	if guid != "" {
		if nerr := e.SimClient.DeleteNamespace(ctx, guid); nerr != nil && err == nil {
			err = nerr
		}
	}
	return err
}

// RemovePod deletes the sandbox container, then sends RemovePodSandbox.
func (e *Env) RemovePod(ctx context.Context, p Pod) error {
	e.mu.Lock()
	delete(e.pods, p.ID)
	e.mu.Unlock()
	if err := e.Ctr.ContainerService().Delete(namespaces.WithNamespace(ctx, K8s), p.ID); err != nil {
		return err
	}
	return e.NRI.RemovePodSandbox(ctx, &api.RemovePodSandboxRequest{Pod: p.NRIPod()})
}

// ForgetPod drops a pod from the runtime's view without telling any plugin
// (what happens while the plugin is down).
func (e *Env) ForgetPod(ctx context.Context, p Pod, guid hcn.GUID) error {
	e.mu.Lock()
	delete(e.pods, p.ID)
	e.mu.Unlock()
	if guid != "" {
		if err := e.SimClient.DeleteNamespace(ctx, guid); err != nil {
			return err
		}
	}
	return e.Ctr.ContainerService().Delete(namespaces.WithNamespace(ctx, K8s), p.ID)
}

// AddPodSilently creates a sandbox and lists it as running without telling
// any plugin (a pod started while the plugin was down).
func (e *Env) AddPodSilently(ctx context.Context, p Pod) (hcn.GUID, error) {
	guid, err := e.CreateSandbox(ctx, p)
	if err != nil {
		return "", err
	}
	e.mu.Lock()
	e.pods[p.ID] = p.NRIPod()
	e.mu.Unlock()
	return guid, nil
}

// AddRuntimePod lists a pod as running in what the runtime side reports
// (Synchronize), for a sandbox created already.
func (e *Env) AddRuntimePod(p Pod) {
	e.mu.Lock()
	e.pods[p.ID] = p.NRIPod()
	e.mu.Unlock()
}

// DeleteSandbox deletes the sandbox container from containerd.
func (e *Env) DeleteSandbox(ctx context.Context, id string) error {
	return e.Ctr.ContainerService().Delete(namespaces.WithNamespace(ctx, K8s), id)
}
