package main

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn/hcnsim"
)

// simulated serves a simulator over TCP and returns it with the flags
// that point a command at it.
func simulated(t *testing.T) (*hcnsim.Sim, []string) {
	t.Helper()
	sim := hcnsim.New()
	srv := httptest.NewServer(hcnsim.Handler(sim))
	t.Cleanup(srv.Close)
	return sim, []string{"--hcn-backend", "simulated", "--hcn-simulator", "tcp://" + strings.TrimPrefix(srv.URL, "http://")}
}

// cleanup refuses while the plugin answers (it would rebuild what cleanup
// removes, for every running pod) and removes nothing; once the plugin is
// gone it removes the plugin's endpoints and nothing else (the CNI's
// endpoints carry every pod's network).
func TestCleanupRefusesWhileThePluginAnswersAndTakesOnlyOurs(t *testing.T) {
	sim, flags := simulated(t)
	ctx := context.Background()
	nat, err := sim.CreateNetwork(ctx, hcn.NetworkSpec{Name: "nat", Type: hcn.NetworkNAT, Subnet: "172.30.0.0/24", Gateway: "172.30.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{hcn.DefaultEndpointPrefix + "sb1", "cbr0_sb1"} {
		if _, err := sim.CreateEndpoint(ctx, hcn.EndpointSpec{Name: name, NetworkID: nat.ID}); err != nil {
			t.Fatal(err)
		}
	}
	plugin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	var stdout, stderr bytes.Buffer
	err = cleanupCmd(append(flags, "--admin-listen", strings.TrimPrefix(plugin.URL, "http://")), &stdout, &stderr)
	if !errors.Is(err, errPluginRunning) || len(sim.State().Endpoints) != 2 {
		t.Fatalf("cleanup while the plugin answers: %v, %d endpoints left; want refused, nothing removed", err, len(sim.State().Endpoints))
	}
	addr := strings.TrimPrefix(plugin.URL, "http://")
	plugin.Close()
	if err := cleanupCmd(append(flags, "--admin-listen", addr), &stdout, &stderr); err != nil {
		t.Fatalf("cleanup once the plugin is gone: %v", err)
	}
	if eps := sim.State().Endpoints; len(eps) != 1 || eps[0].Name != "cbr0_sb1" {
		t.Fatalf("left %+v, want the CNI's endpoint alone", eps)
	}
}
