// Command demo runs the plugin's main job on Linux with real components: a
// containerd daemon, the NRI runtime side, the plugin as its own process and
// the HNS simulator in place of HNS. It starts a few pods the way containerd's
// CRI does on Windows, prints what the runtime was told and the endpoints
// the plugin built, then stops a pod and shows its endpoint gone.
//
//	make demo        (needs root and `make containerd`)
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/sirupsen/logrus"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/request"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/test/harness"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func run() error {
	// The NRI runtime side logs through logrus' standard logger; keep the
	// demo's output to what it shows.
	logrus.SetLevel(logrus.WarnLevel)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	fmt.Println("== starting containerd, the HNS simulator and the NRI runtime side")
	env, err := harness.Start(ctx, harness.Options{})
	if err != nil {
		return err
	}
	defer env.Close()
	if os.Getenv("KEEP_E2E_DIR") != "" {
		fmt.Println("== starting nri-hcn-portmap (its log, kept after the demo:", env.Dir+"/plugin.log)")
	} else {
		fmt.Println("== starting nri-hcn-portmap (its log is removed with the demo's temp dir; KEEP_E2E_DIR=1 keeps it)")
	}
	if err := env.StartPlugin(ctx); err != nil {
		return err
	}
	pods := []harness.Pod{
		{ID: "4f1c0b9e2d7a4c1b8e3f6a5d9c2b7e1f4a8d3c6b9e2f5a1d7c4b8e3f6a9d2c5b", Name: "web", Namespace: "shop",
			Annotations: map[string]string{request.AnnotationPortMappings: "8080:80, 10.0.0.4:8443:443/tcp, 5353:53/udp"}},
		{ID: "9a3e7c1f5b2d8e4a6c0f3b9d1e7a5c2f8b4d6e0a3c9f1b7d5e2a8c4f6b0d3e9a", Name: "api", Namespace: "shop",
			Annotations: map[string]string{request.AnnotationPortMappings: `[{"containerPort":8000,"hostPort":9000,"hostIP":"fd00::4"}]`}},
		{ID: "2c8f4a6e0b3d9f1c7a5e2b8d4f6a0c3e9b1d7f5a2c8e4b6d0f3a9c1e7b5d2f8a", Name: "plain", Namespace: "default"},
		{ID: "7e1a5c9f3b6d2e8a4c0f7b3d9e5a1c6f2b8d4e0a7c3f9b5d1e6a2c8f4b0d7e3a", Name: "typo", Namespace: "default",
			Annotations: map[string]string{request.AnnotationPortMappings: "8081:80/sctp"}},
		{ID: "1b7d3f9a5c2e8b4d0f6a3c9e1b7d5f2a8c4e0b6d3f9a1c7e5b2d8f4a0c6e3b9d", Name: "rdp", Namespace: "default",
			Annotations: map[string]string{request.AnnotationPortMappings: "3389:3389"}},
		{ID: "6d2f8b4a0e7c3d9f5b1a8e4c0d6f2b9a5e1c7d3f0b8a4e6c2d9f5b1e7a3c0d8f", Name: "thief", Namespace: "default",
			Annotations: map[string]string{request.AnnotationPortMappings: "8080:8080"}},
	}
	guids := map[string]hcn.GUID{}
	for _, p := range pods {
		guid, err := env.RunPod(ctx, p)
		guids[p.ID] = guid
		fmt.Printf("RunPodSandbox %s/%s (annotation %q, HCN namespace %s): ", p.Namespace, p.Name,
			p.Annotations[request.AnnotationPortMappings], guid)
		if err != nil {
			fmt.Println("FAILED:", err)
			continue
		}
		fmt.Println("ok")
	}
	fmt.Println("\n== endpoints in HCN (nri-hcn-portmap status)")
	if err := printStatus(ctx, env); err != nil {
		return err
	}
	fmt.Println("\n== StopPodSandbox shop/web, then status again")
	if err := env.StopPod(ctx, pods[0], guids[pods[0].ID]); err != nil {
		return err
	}
	if err := printStatus(ctx, env); err != nil {
		return err
	}

	// Stock containerd on Windows sends no NRI pod events: the plugin then
	// follows containerd's event stream, and can take Kubernetes hostPort
	// from the CRI sandbox metadata.
	fmt.Println("\n== restarting the plugin with --source containerd (what stock containerd on Windows needs)")
	env.Plugin.Stop()
	if err := env.StartPluginEvents(ctx); err != nil {
		return err
	}
	cri := harness.Pod{ID: "c5d1e9a3f7b2c6d0e4a8f1b5c9d3e7a2f6b0c4d8e1a5f9b3c7d2e6a0f4b8c1d5", Name: "dns", Namespace: "kube-system",
		UID: "2b6f", HostPorts: []*runtimeapi.PortMapping{{Protocol: runtimeapi.Protocol_UDP, ContainerPort: 53, HostPort: 5353}},
		Annotations: map[string]string{request.AnnotationPortMappings: "9153:9153"}}
	guid, err := env.CreateSandbox(ctx, cri)
	if err != nil {
		return err
	}
	if err := env.PublishStart(ctx, cri.ID); err != nil {
		return err
	}
	fmt.Printf("/tasks/start %s/%s (hostPort 5353/udp from the pod spec, annotation \"9153:9153\", HCN namespace %s)\n",
		cri.Namespace, cri.Name, guid)
	err = harness.Eventually(ctx, 10*time.Second, func() error {
		entries, err := env.Status(ctx)
		if err != nil {
			return err
		}
		for _, e := range entries {
			if e.Sandbox == cri.ID {
				return nil
			}
		}
		return fmt.Errorf("no endpoint for %s yet", cri.Name)
	})
	if err != nil {
		return err
	}
	return printStatus(ctx, env)
}

func printStatus(ctx context.Context, env *harness.Env) error {
	out, err := env.StatusTable(ctx)
	fmt.Print(out)
	return err
}
