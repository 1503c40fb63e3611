// A real CRI pod through containerd's own CRI and NRI: a sandbox image
// built here (no registry is reachable) and a CRI client.

package harness

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/containerd/containerd/v2/pkg/namespaces"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/request"
)

// PauseImage is the sandbox image containerd's CRI is pinned to in an Env
// with Options.CRI.
const PauseImage = "localhost/hcnpm-pause:1"

// ImportPauseImage builds the pause program statically, packs it as an OCI
// image and imports and unpacks it into containerd's k8s.io namespace, as
// `ctr -n k8s.io images import` would.
func (e *Env) ImportPauseImage(ctx context.Context) error {
	root, err := ModuleRoot()
	if err != nil {
		return err
	}
	bin := filepath.Join(e.Dir, "pause")
	cmd := exec.Command("go", "build", "-o", bin, "./test/pause")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("building pause: %w\n%s", err, out)
	}
	archive, err := pauseArchive(bin)
	if err != nil {
		return err
	}
	ctx = namespaces.WithNamespace(ctx, K8s)
	imgs, err := e.Ctr.Import(ctx, bytes.NewReader(archive))
	if err != nil {
		return fmt.Errorf("importing the pause image: %w", err)
	}
	for _, im := range imgs {
		img, err := e.Ctr.GetImage(ctx, im.Name)
		if err != nil {
			return err
		}
		if err := img.Unpack(ctx, "overlayfs"); err != nil {
			return fmt.Errorf("unpacking %s: %w", im.Name, err)
		}
	}
	return nil
}

// pauseArchive is an OCI image layout (tar) of one layer holding /pause.
func pauseArchive(bin string) ([]byte, error) {
	data, err := os.ReadFile(bin)
	if err != nil {
		return nil, err
	}
	var layer, raw bytes.Buffer
	gz := gzip.NewWriter(&layer)
	tw := tar.NewWriter(io.MultiWriter(gz, &raw))
	if err := tw.WriteHeader(&tar.Header{Name: "pause", Mode: 0o755, Size: int64(len(data)), Typeflag: tar.TypeReg}); err != nil {
		return nil, err
	}
	if _, err := tw.Write(data); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := gz.Close(); err != nil {
		return nil, err
	}
	digest := func(b []byte) string { s := sha256.Sum256(b); return "sha256:" + hex.EncodeToString(s[:]) }
	config, _ := json.Marshal(map[string]any{
		"architecture": "amd64", "os": "linux",
		"config": map[string]any{"Entrypoint": []string{"/pause"}},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{digest(raw.Bytes())}},
	})
	desc := func(mediaType string, b []byte) map[string]any {
		return map[string]any{"mediaType": mediaType, "digest": digest(b), "size": len(b)}
	}
	manifest, _ := json.Marshal(map[string]any{"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
		"config": desc("application/vnd.oci.image.config.v1+json", config),
		"layers": []any{desc("application/vnd.oci.image.layer.v1.tar+gzip", layer.Bytes())}})
	md := desc("application/vnd.oci.image.manifest.v1+json", manifest)
	md["annotations"] = map[string]string{"io.containerd.image.name": PauseImage, "org.opencontainers.image.ref.name": "1"}
	md["platform"] = map[string]string{"architecture": "amd64", "os": "linux"}
	index, _ := json.Marshal(map[string]any{"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": []any{md}})

	var out bytes.Buffer
	w := tar.NewWriter(&out)
	add := func(name string, b []byte) error {
		if err := w.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(b)), Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		_, err := w.Write(b)
		return err
	}
	files := []struct {
		name string
		data []byte
	}{
		{"oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)},
		{"index.json", index},
		{"blobs/sha256/" + digest(config)[7:], config},
		{"blobs/sha256/" + digest(manifest)[7:], manifest},
		{"blobs/sha256/" + digest(layer.Bytes())[7:], layer.Bytes()},
	}
	for _, f := range files {
		if err := add(f.name, f.data); err != nil {
			return nil, err
		}
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// CRI returns a CRI runtime client of containerd.
func (e *Env) CRI() (runtimeapi.RuntimeServiceClient, func(), error) {
	conn, err := grpc.NewClient("unix://"+e.CtrAddress, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, nil, err
	}
	return runtimeapi.NewRuntimeServiceClient(conn), func() { conn.Close() }, nil
}

// HostNetworkPod is a CRI sandbox config of a hostNetwork pod (no CNI
// needed; CRI wants an empty hostname then).
func (e *Env) HostNetworkPod(name string, annotations map[string]string) *runtimeapi.PodSandboxConfig {
	return e.criPod(name, "", annotations, runtimeapi.NamespaceMode_NODE)
}

// criPod is a CRI sandbox config in namespace default, its logs under the
// harness's folder, on the network mode given.
func (e *Env) criPod(name, hostname string, annotations map[string]string, network runtimeapi.NamespaceMode) *runtimeapi.PodSandboxConfig {
	logs := filepath.Join(e.Dir, "pod-logs", name)
	_ = os.MkdirAll(logs, 0o755)
	return &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: name, Uid: "uid-" + name, Namespace: "default"},
		Hostname:     hostname,
		LogDirectory: logs,
		Annotations:  annotations,
		Linux: &runtimeapi.LinuxPodSandboxConfig{SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
			NamespaceOptions: &runtimeapi.NamespaceOption{Network: network}}},
	}
}

// FakeCNIDNS is the DNS the fake CNI network reports for a pod's
// interface: its resolver and search list.
func FakeCNIDNS() (servers, search []string) {
	return []string{"10.22.0.2"}, []string{"cni.example", "svc.cni.example"}
}

// installFakeCNI builds the fake CNI plugin into dir/cni/bin (as itself
// and as loopback, which containerd's CRI runs for every pod on Linux) and
// puts a network of it in dir/cni/conf.
func installFakeCNI(dir string) error {
	root, err := ModuleRoot()
	if err != nil {
		return err
	}
	bin, conf := filepath.Join(dir, "cni", "bin"), filepath.Join(dir, "cni", "conf")
	for _, d := range []string{bin, conf} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	cmd := exec.Command("go", "build", "-o", filepath.Join(bin, "fakecni"), "./test/fakecni")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("building the fake CNI plugin: %w\n%s", err, out)
	}
	if err := os.Link(filepath.Join(bin, "fakecni"), filepath.Join(bin, "loopback")); err != nil {
		return err
	}
	servers, search := FakeCNIDNS()
	network, err := json.Marshal(map[string]any{"cniVersion": "1.0.0", "name": "fake",
		"plugins": []any{map[string]any{"type": "fakecni", "dns": map[string]any{"nameservers": servers, "search": search}}}})
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(conf, "10-fake.conflist"), network, 0o644)
}

// PodNetworkPod is a CRI sandbox config of a pod on the pod network (the
// CNI's), without a DNS config of its own (dnsPolicy None with none set,
// or a runtime that keeps none): what it gets is the CNI's.
func (e *Env) PodNetworkPod(name string, annotations map[string]string) *runtimeapi.PodSandboxConfig {
	return e.criPod(name, name, annotations, runtimeapi.NamespaceMode_POD)
}

// SandboxMetadata is the io.cri-containerd.sandbox.metadata extension of
// the sandbox container id, as containerd's CRI wrote it.
func (e *Env) SandboxMetadata(ctx context.Context, id string) ([]byte, error) {
	c, err := e.Ctr.LoadContainer(namespaces.WithNamespace(ctx, K8s), id)
	if err != nil {
		return nil, err
	}
	ext, err := c.Extensions(namespaces.WithNamespace(ctx, K8s))
	if err != nil {
		return nil, err
	}
	x, ok := ext[request.ExtensionMetadata]
	if !ok {
		return nil, fmt.Errorf("sandbox %s has no %s", id, request.ExtensionMetadata)
	}
	return x.GetValue(), nil
}
