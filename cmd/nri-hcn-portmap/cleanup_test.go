package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/config"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/admin"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/test/testfs"
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
	for _, name := range []string{config.EndpointPrefix + sb, "cbr0_" + sb} {
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
	// the plugin: its admin endpoints, its answers proved with its key
	keyFile := filepath.Join(testfs.TempDir(t), "admin", "admin.key")
	key, err := admin.NewKey(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	a := &admin.Admin{Key: key, Log: logrus.NewEntry(logrus.New())}
	l, err := admin.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sctx, stop := context.WithCancel(ctx)
	served := make(chan struct{})
	go func() { _ = a.Serve(sctx, l); close(served) }()
	addr := l.Addr().String()
	flags := append(hns.flags, "--config", "", "--admin-listen", addr, "--admin-key-file", keyFile)
	var stdout, stderr bytes.Buffer
	err = cleanupCmd(flags, &stdout, &stderr)
	if o, c := there(); !errors.Is(err, errPluginRunning) || !o || !c {
		t.Fatalf("cleanup while the plugin answers: %v, ours left %v, the CNI's %v; want refused, nothing removed", err, o, c)
	}
	stop()
	<-served
	// issue 46: another program on the plugin's address (its answer
	// proves nothing) does not keep the cleanup from running: the plugin
	// does not run where another answers; it is named
	squatter := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(`{"status":"ok"}`)) }))
	if squatter.Listener, err = admin.Listen(addr); err != nil {
		t.Fatal(err)
	}
	squatter.Start()
	stderr.Reset()
	if err := cleanupCmd(flags, &stdout, &stderr); err != nil || !strings.Contains(stderr.String(), "another program holds the plugin's address") {
		t.Fatalf("cleanup with another program on the plugin's address: %v, said %q; want it run, saying so", err, stderr.String())
	}
	if o, c := there(); o || !c {
		t.Fatalf("after cleanup ours left %v, the CNI's %v; want the CNI's endpoint alone", o, c)
	}
	squatter.Close()
	if err := cleanupCmd(flags, &stdout, &stderr); err != nil {
		t.Fatalf("cleanup once nothing answers: %v", err)
	}
}
