//go:build linux

// Command capture-cri-metadata records the io.cri-containerd.sandbox.metadata
// extension exactly as containerd's CRI writes it, for the plugin's decoder
// tests. It starts containerd (with CRI) in a temp dir, imports a tiny pause
// image it builds itself (no registry needed), runs one host-network pod
// sandbox through the CRI API with annotations and port mappings, and writes
// the sandbox container's extension to -out.
//
//	go install github.com/containerd/containerd/v2/cmd/containerd@v2.4.2
//	apt-get install runc
//	go run ./hack/capture-cri-metadata -out plugin/request/testdata/cri-sandbox-metadata.json
//
// Needs root. Not part of the test run; its output is committed.
package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	apievents "github.com/containerd/containerd/api/events"
	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/request"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/test/harness"
)

const image = "localhost/nri-hcn-portmap/pause:capture"

func main() {
	out := flag.String("out", "plugin/request/testdata/cri-sandbox-metadata.json", "where to write the extension JSON")
	flag.Parse()
	if err := run(*out); err != nil {
		fmt.Fprintln(os.Stderr, "capture:", err)
		os.Exit(1)
	}
}

func run(out string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir, err := os.MkdirTemp("", "capture-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	bin, err := harness.FindContainerd()
	if err != nil {
		return err
	}
	sock := filepath.Join(dir, "c.sock")
	conf := fmt.Sprintf(`version = 3
root = '%[1]s/root'
state = '%[1]s/state'
[grpc]
  address = '%[2]s'
[ttrpc]
  address = '%[2]s.ttrpc'
[plugins]
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = '%[3]s'
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ['%[1]s/cni-bin']
    conf_dir = '%[1]s/cni-conf'
`, dir, sock, image)
	if err := os.WriteFile(filepath.Join(dir, "config.toml"), []byte(conf), 0o644); err != nil {
		return err
	}
	logf, _ := os.Create(filepath.Join(dir, "containerd.log"))
	cmd := exec.Command(bin, "--config", filepath.Join(dir, "config.toml"))
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return err
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()

	var c *client.Client
	for i := 0; ; i++ {
		if c, err = client.New(sock, client.WithTimeout(time.Second)); err == nil {
			break
		}
		if i > 100 {
			return fmt.Errorf("containerd did not start: %w", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	defer c.Close()
	k8s := namespaces.WithNamespace(ctx, harness.K8s)

	layout, err := pauseImage()
	if err != nil {
		return err
	}
	imgs, err := c.Import(k8s, bytes.NewReader(layout))
	if err != nil {
		return fmt.Errorf("import: %w", err)
	}
	if err := client.NewImage(c, imgs[0]).Unpack(k8s, "overlayfs"); err != nil {
		return fmt.Errorf("unpack: %w", err)
	}

	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	rt := runtime.NewRuntimeServiceClient(conn)
	cfg := &runtime.PodSandboxConfig{
		Metadata: &runtime.PodSandboxMetadata{Name: "web", Uid: "7d9a8c36-1f0e-4a53-9a51-2a1b5e7c9d10", Namespace: "shop"},
		Labels:   map[string]string{"app": "web"},
		Annotations: map[string]string{
			request.AnnotationPortMappings: "10.0.0.4:8443:443/tcp",
			"kubernetes.io/config.source":  "api",
		},
		PortMappings: []*runtime.PortMapping{
			{Protocol: runtime.Protocol_TCP, ContainerPort: 80, HostPort: 8080},
			{Protocol: runtime.Protocol_UDP, ContainerPort: 53, HostPort: 5353, HostIp: "10.0.0.4"},
			{Protocol: runtime.Protocol_TCP, ContainerPort: 81},
		},
		Linux: &runtime.LinuxPodSandboxConfig{SecurityContext: &runtime.LinuxSandboxSecurityContext{
			NamespaceOptions: &runtime.NamespaceOption{Network: runtime.NamespaceMode_NODE}}},
	}
	// containerd writes the extension when it creates the sandbox container,
	// before the task starts: take it from the container as soon as it
	// exists, so the capture does not depend on runc working on this host.
	evs, errs := c.Subscribe(ctx, `namespace=="k8s.io",topic=="/containers/create"`)
	captured := make(chan []byte, 1)
	go func() {
		for {
			select {
			case ev := <-evs:
				var created apievents.ContainerCreate
				if err := proto.Unmarshal(ev.Event.GetValue(), &created); err != nil {
					continue
				}
				info, err := c.ContainerService().Get(k8s, created.ID)
				if err != nil {
					continue
				}
				if ext, ok := info.Extensions[request.ExtensionMetadata]; ok {
					fmt.Printf("sandbox %s: extension %s\n", created.ID, ext.GetTypeUrl())
					captured <- ext.GetValue()
					return
				}
			case <-errs:
				return
			case <-ctx.Done():
				return
			}
		}
	}()
	time.Sleep(300 * time.Millisecond) // let the subscription settle
	var raw []byte
	for i := 0; raw == nil; i++ {
		resp, err := rt.RunPodSandbox(ctx, &runtime.RunPodSandboxRequest{Config: cfg})
		if err == nil {
			_, _ = rt.StopPodSandbox(ctx, &runtime.StopPodSandboxRequest{PodSandboxId: resp.PodSandboxId})
			_, _ = rt.RemovePodSandbox(ctx, &runtime.RemovePodSandboxRequest{PodSandboxId: resp.PodSandboxId})
		} else {
			fmt.Fprintln(os.Stderr, "RunPodSandbox (the record is taken at creation anyway):", err)
		}
		select {
		case raw = <-captured:
		case <-time.After(2 * time.Second):
			if i > 10 {
				return fmt.Errorf("no sandbox container with %s was created", request.ExtensionMetadata)
			}
		}
	}
	var pretty bytes.Buffer
	if err := json.Indent(&pretty, raw, "", "  "); err != nil {
		return err
	}
	pretty.WriteByte('\n')
	fmt.Println("wrote", out)
	return os.WriteFile(out, pretty.Bytes(), 0o644)
}

// pauseImage builds an OCI image layout tar holding one static binary that
// sleeps until killed.
func pauseImage() ([]byte, error) {
	dir, err := os.MkdirTemp("", "pause-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	src := filepath.Join(dir, "main.go")
	if err := os.WriteFile(src, []byte("package main\n\nimport \"os/signal\"\nimport \"os\"\nimport \"syscall\"\n\nfunc main() { c := make(chan os.Signal, 1); signal.Notify(c, syscall.SIGTERM, syscall.SIGINT); <-c }\n"), 0o644); err != nil {
		return nil, err
	}
	b := exec.Command("go", "build", "-o", filepath.Join(dir, "pause"), src)
	b.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GO111MODULE=off")
	if o, err := b.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("building pause: %w: %s", err, o)
	}
	pause, err := os.ReadFile(filepath.Join(dir, "pause"))
	if err != nil {
		return nil, err
	}
	var layer bytes.Buffer
	tw := tar.NewWriter(&layer)
	if err := tw.WriteHeader(&tar.Header{Name: "pause", Mode: 0o755, Size: int64(len(pause))}); err != nil {
		return nil, err
	}
	_, _ = tw.Write(pause)
	_ = tw.Close()
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, _ = zw.Write(layer.Bytes())
	_ = zw.Close()
	digest := func(b []byte) string { return fmt.Sprintf("sha256:%x", sha256.Sum256(b)) }
	cfg, _ := json.Marshal(map[string]any{
		"architecture": "amd64", "os": "linux",
		"config": map[string]any{"Entrypoint": []string{"/pause"}},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{digest(layer.Bytes())}},
	})
	manifest, _ := json.Marshal(map[string]any{
		"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
		"config": map[string]any{"mediaType": "application/vnd.oci.image.config.v1+json", "digest": digest(cfg), "size": len(cfg)},
		"layers": []any{map[string]any{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": digest(gz.Bytes()), "size": gz.Len()}},
	})
	index, _ := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"manifests": []any{map[string]any{"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": digest(manifest),
			"size": len(manifest), "platform": map[string]string{"architecture": "amd64", "os": "linux"},
			"annotations": map[string]string{"io.containerd.image.name": image, "org.opencontainers.image.ref.name": "capture"}}},
	})
	var out bytes.Buffer
	ow := tar.NewWriter(&out)
	add := func(name string, b []byte) {
		_ = ow.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(b))})
		_, _ = ow.Write(b)
	}
	add("oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`))
	add("index.json", index)
	for _, blob := range [][]byte{cfg, manifest, gz.Bytes()} {
		add("blobs/sha256/"+digest(blob)[len("sha256:"):], blob)
	}
	_ = ow.Close()
	return out.Bytes(), nil
}
