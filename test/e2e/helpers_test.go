package e2e

import (
	"github.com/containerd/nri/pkg/api"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/test/harness"
)

func apiRun(p harness.Pod) *api.RunPodSandboxRequest {
	return &api.RunPodSandboxRequest{Pod: p.NRIPod()}
}

func waitSync(env *harness.Env) <-chan struct{} { return env.Synced() }
