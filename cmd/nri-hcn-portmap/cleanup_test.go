package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
)

// cleanup refuses while the plugin answers (it would rebuild what cleanup
// removes, for every running pod) and removes nothing; once the plugin is
// gone it removes the plugin's endpoints and nothing else (the CNI's
// endpoints carry every pod's network).
func TestCleanupRefusesWhileThePluginAnswersAndTakesOnlyOurs(t *testing.T) {
	hns := newTestHNS(t)
	ctx := context.Background()
	nat, err := hns.svc.CreateNetwork(ctx, hcn.NetworkSpec{Name: fmt.Sprint("nat-cleanup-", time.Now().UnixNano()), Type: hcn.NetworkNAT,
		Subnet: "172.30.0.0/24", Gateway: "172.30.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	sb := fmt.Sprint("sb-", time.Now().UnixNano())
	var ours, cni string
	for _, name := range []string{hcn.DefaultEndpointPrefix + sb, "cbr0_" + sb} {
		ep, err := hns.svc.CreateEndpoint(ctx, hcn.EndpointSpec{Name: name, NetworkID: nat.ID})
		if err != nil {
			t.Fatal(err)
		}
		ours, cni = cni, ep.ID
	}
	t.Cleanup(func() { _ = hns.svc.DeleteEndpoint(ctx, cni) })
	there := func() (oursThere, cniThere bool) {
		eps, err := hns.svc.ListEndpoints(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, ep := range eps {
			oursThere = oursThere || ep.ID == ours
			cniThere = cniThere || ep.ID == cni
		}
		return
	}
	plugin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	var stdout, stderr bytes.Buffer
	err = cleanupCmd(append(hns.flags, "--config", "", "--admin-listen", strings.TrimPrefix(plugin.URL, "http://")), &stdout, &stderr)
	if o, c := there(); !errors.Is(err, errPluginRunning) || !o || !c {
		t.Fatalf("cleanup while the plugin answers: %v, ours left %v, the CNI's %v; want refused, nothing removed", err, o, c)
	}
	addr := strings.TrimPrefix(plugin.URL, "http://")
	plugin.Close()
	if err := cleanupCmd(append(hns.flags, "--config", "", "--admin-listen", addr), &stdout, &stderr); err != nil {
		t.Fatalf("cleanup once the plugin is gone: %v", err)
	}
	if o, c := there(); o || !c {
		t.Fatalf("after cleanup ours left %v, the CNI's %v; want the CNI's endpoint alone", o, c)
	}
}
