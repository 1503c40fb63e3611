package nri

import (
	"context"
	"errors"
	"testing"

	"github.com/containerd/nri/pkg/api"
	"github.com/sirupsen/logrus"
)

// Regression (load and faults, 12): with failure_policy = fail-closed the
// plugin asked the runtime to fail requests it could not answer, so while
// it was down StopPodSandbox and RemovePodSandbox failed too.
func TestFailurePolicyNeverFailsTheRuntimesRequests(t *testing.T) {
	p := failurePolicy()
	if p.GetFailRequest() || !p.GetKeepConnected() {
		t.Fatalf("failure policy %+v: want KeepConnected and never FailRequest", p)
	}
}

// TestLaunchedIdentity: a plugin the runtime launched is known by the name
// and index in NRI's environment.
func TestLaunchedIdentity(t *testing.T) {
	t.Setenv(api.PluginSocketEnvVar, "")
	if Launched() || Identity() != "" {
		t.Fatalf("without NRI's environment: launched %v, identity %q", Launched(), Identity())
	}
	t.Setenv(api.PluginSocketEnvVar, "3")
	t.Setenv(api.PluginNameEnvVar, "hcn-portmap")
	t.Setenv(api.PluginIdxEnvVar, "10")
	if !Launched() || Identity() != "10-hcn-portmap" {
		t.Fatalf("launched %v, identity %q; want 10-hcn-portmap", Launched(), Identity())
	}
}

// TestConfigureHandsOverTheRuntimesConfiguration: Configure passes the text
// on; a refusal fails Synchronize (and everything after) with the hook's
// error; before a core exists no event reaches one (pod starts are
// refused, stops are no-ops).
func TestConfigureHandsOverTheRuntimesConfiguration(t *testing.T) {
	var got []string
	refuse := errors.New("10-hcn-portmap.conf:2: unknown key")
	src := NewSource(nil, Config{Launched: true, Configure: func(_ context.Context, text string) error {
		got = append(got, text)
		if text == "bad" {
			return refuse
		}
		return nil
	}}, logrus.NewEntry(logrus.New()))
	h := &nriHandler{src: src}
	pod := &api.PodSandbox{Id: "sb1", Name: "web", Namespace: "default"}
	if err := h.RunPodSandbox(context.Background(), pod); !errors.Is(err, errNotConfigured) {
		t.Fatalf("RunPodSandbox before Configure: %v", err)
	}
	if _, err := h.Synchronize(context.Background(), nil, nil); !errors.Is(err, errNotConfigured) {
		t.Fatalf("Synchronize before Configure: %v", err)
	}
	if err := h.StopPodSandbox(context.Background(), pod); err != nil {
		t.Fatalf("StopPodSandbox before Configure: %v", err)
	}
	// a refusal fails the registration at Synchronize, with the reason
	if _, err := h.Configure(context.Background(), "bad", "containerd", "v2.4.2"); err != nil {
		t.Fatalf("Configure: %v", err)
	}
	if len(got) != 1 || got[0] != "bad" {
		t.Fatalf("hook got %q", got)
	}
	if _, err := h.Synchronize(context.Background(), nil, nil); !errors.Is(err, ErrConfigRefused) || !errors.Is(err, refuse) {
		t.Fatalf("Synchronize after a refused configuration: %v", err)
	}
	if err := h.RunPodSandbox(context.Background(), pod); !errors.Is(err, refuse) {
		t.Fatalf("RunPodSandbox after a refused configuration: %v", err)
	}
}
