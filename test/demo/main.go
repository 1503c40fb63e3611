// Command demo runs the plugin's main job on Linux with real components: a
// containerd daemon, the NRI runtime side, the plugin as its own process and
// the HNS simulator in place of HNS. It starts a pod the way containerd's
// CRI does on Windows (containerd's events), then pods through NRI, three
// of them refused on purpose (each says why), prints the endpoints the
// plugin built, stops a pod and shows its endpoint gone, and ends with a
// summary (exit 1 when a pod did not end as meant).
//
//	make demo        (needs root and `make containerd`)
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"regexp"
	"time"

	"github.com/sirupsen/logrus"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/request"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/test/harness"
)

func main() {
	if err := run(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

// demoPod is a pod the demo starts and what it shows: refused says why the
// plugin must refuse it ("": mapped).
type demoPod struct {
	harness.Pod
	refused string
}

func run(out io.Writer) error {
	say := func(format string, args ...any) { fmt.Fprintf(out, format, args...) }
	// The NRI runtime side logs through logrus' standard logger; keep the
	// demo's output to what it shows.
	logrus.SetLevel(logrus.WarnLevel)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	say("== starting containerd, the HNS simulator and the NRI runtime side\n")
	env, err := harness.Start(ctx, harness.Options{})
	if err != nil {
		return err
	}
	defer env.Close()
	say("== the plugin's configuration turns two checks off: admission.pod_security = \"off\" and admission.network_policy = \"off\".\n" +
		"   The demo runs no API server, and both read one (on a node: [kubernetes], docs/safety.md): the annotation obeys its\n" +
		"   namespace's Pod Security level, and a host port is mapped only where the pod's NetworkPolicies admit every source\n" +
		"   to it; with the checks on and no API server no host port would be mapped\n")
	if os.Getenv("KEEP_E2E_DIR") != "" {
		say("== the plugin's log, kept after the demo: %s/plugin.log\n", env.Dir)
	} else {
		say("== the plugin's log is removed with the demo's temp dir (KEEP_E2E_DIR=1 keeps it)\n")
	}
	mapped, refused, unexpected := 0, 0, []string{}
	tell := func(name, why string, err error) {
		switch {
		case err == nil && why == "":
			mapped++
			say("ok\n")
		case err != nil && why != "":
			refused++
			say("refused, as meant (%s):\n   %s\n", why, reason(err))
		case err != nil:
			unexpected = append(unexpected, name)
			say("FAILED, unexpectedly: %s\n", reason(err))
		default:
			unexpected = append(unexpected, name)
			say("mapped, UNEXPECTEDLY (want refused: %s)\n", why)
		}
	}

	// Windows first: stock containerd on Windows sends no NRI pod events,
	// so the plugin follows containerd's event stream (/tasks/start) and
	// takes Kubernetes hostPort from the CRI sandbox metadata.
	say("\n== the Windows path: nri-hcn-portmap --source containerd (containerd's events: what stock containerd on Windows gives)\n")
	if err := env.StartPluginEvents(ctx); err != nil {
		return err
	}
	cri := harness.Pod{ID: "c5d1e9a3f7b2c6d0e4a8f1b5c9d3e7a2f6b0c4d8e1a5f9b3c7d2e6a0f4b8c1d5", Name: "dns", Namespace: "kube-system",
		UID: "2b6f", HostPorts: []*runtimeapi.PortMapping{{Protocol: runtimeapi.Protocol_UDP, ContainerPort: 53, HostPort: 5354}},
		Annotations: map[string]string{request.AnnotationPortMappings: "9153:9153"}}
	guid, err := env.CreateSandbox(ctx, cri)
	if err != nil {
		return err
	}
	if err := env.PublishStart(ctx, cri.ID); err != nil {
		return err
	}
	say("/tasks/start %s/%s (hostPort 5354/udp from the pod spec, annotation \"9153:9153\", HCN namespace %s): ", cri.Namespace, cri.Name, guid)
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
	tell(cri.Name, "", err)
	say("\n== endpoints in HCN (nri-hcn-portmap status)\n")
	if err := printStatus(ctx, env, out); err != nil {
		return err
	}

	// The NRI path: containerd built with NRI on answers RunPodSandbox
	// only after the plugin has mapped (or refused) the pod.
	say("\n== the NRI path: nri-hcn-portmap --source nri (containerd with NRI's pod events, not stock on Windows)\n")
	env.Plugin.Stop()
	if err := env.StartPlugin(ctx); err != nil {
		return err
	}
	pods := []demoPod{
		{harness.Pod{ID: "4f1c0b9e2d7a4c1b8e3f6a5d9c2b7e1f4a8d3c6b9e2f5a1d7c4b8e3f6a9d2c5b", Name: "web", Namespace: "shop",
			Annotations: map[string]string{request.AnnotationPortMappings: "8080:80, 10.0.0.4:8443:443/tcp, 5353:53/udp"}}, ""},
		{harness.Pod{ID: "9a3e7c1f5b2d8e4a6c0f3b9d1e7a5c2f8b4d6e0a3c9f1b7d5e2a8c4f6b0d3e9a", Name: "api", Namespace: "shop",
			Annotations: map[string]string{request.AnnotationPortMappings: `[{"containerPort":8000,"hostPort":9000,"hostIP":"10.0.0.5"}]`}}, ""},
		{harness.Pod{ID: "2c8f4a6e0b3d9f1c7a5e2b8d4f6a0c3e9b1d7f5a2c8e4b6d0f3a9c1e7b5d2f8a", Name: "plain", Namespace: "default"}, ""},
		{harness.Pod{ID: "7e1a5c9f3b6d2e8a4c0f7b3d9e5a1c6f2b8d4e0a7c3f9b5d1e6a2c8f4b0d7e3a", Name: "typo", Namespace: "default",
			Annotations: map[string]string{request.AnnotationPortMappings: "8081:80/sctp"}}, "a protocol HNS does not map"},
		{harness.Pod{ID: "1b7d3f9a5c2e8b4d0f6a3c9e1b7d5f2a8c4e0b6d3f9a1c7e5b2d8f4a0c6e3b9d", Name: "rdp", Namespace: "default",
			Annotations: map[string]string{request.AnnotationPortMappings: "3389:3389"}}, "RDP's port is on the node's deny list"},
		{harness.Pod{ID: "6d2f8b4a0e7c3d9f5b1a8e4c0d6f2b9a5e1c7d3f0b8a4e6c2d9f5b1e7a3c0d8f", Name: "thief", Namespace: "default",
			Annotations: map[string]string{request.AnnotationPortMappings: "8080:8080"}}, "host port 8080 is shop/web's"},
	}
	guids := map[string]hcn.GUID{}
	for _, p := range pods {
		guid, err := env.RunPod(ctx, p.Pod)
		guids[p.ID] = guid
		say("RunPodSandbox %s/%s (annotation %q, HCN namespace %s): ", p.Namespace, p.Name, p.Annotations[request.AnnotationPortMappings], guid)
		tell(p.Name, p.refused, err)
	}
	say("\n== endpoints in HCN (nri-hcn-portmap status)\n")
	if err := printStatus(ctx, env, out); err != nil {
		return err
	}
	say("\n== StopPodSandbox shop/web, then status again\n")
	if err := env.StopPod(ctx, pods[0].Pod, guids[pods[0].ID]); err != nil {
		return err
	}
	if err := printStatus(ctx, env, out); err != nil {
		return err
	}
	say("\n== summary: %d pods mapped, %d refused as meant, %d unexpected %v\n", mapped, refused, len(unexpected), unexpected)
	if len(unexpected) > 0 {
		return fmt.Errorf("%d pods did not end as the demo means: %v", len(unexpected), unexpected)
	}
	return nil
}

func printStatus(ctx context.Context, env *harness.Env, out io.Writer) error {
	table, err := env.StatusTable(ctx)
	fmt.Fprint(out, table)
	return err
}

// grpcPrefix is what gRPC puts before an error that crossed the NRI
// connection: not the plugin's words.
var grpcPrefix = regexp.MustCompile(`rpc error: code = \w+ desc = `)

// reason is err in the plugin's words, without gRPC's prefix.
func reason(err error) string { return grpcPrefix.ReplaceAllString(err.Error(), "") }
