package e2e

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"
)

// nodeAddress is an address of this machine other than loopback: where
// Prometheus, on another machine, reaches the node.
func nodeAddress(t *testing.T) netip.Addr {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil && p.Addr().Is4() && !p.Addr().IsLoopback() && !p.Addr().IsLinkLocalUnicast() {
			return p.Addr()
		}
	}
	t.Fatalf("this test needs an IPv4 address other than loopback on the machine; it has %v", addrs)
	return netip.Addr{}
}

// Issue 25: with admin.metrics_listen on every address, Prometheus scrapes
// /metrics (with nri_hcn_portmap_build_info) from outside the node, and
// nothing else is answered there: POST /reload, /mappings, /healthz and
// pprof stay on the loopback admin address, which is not reachable from
// outside. The plugin refuses an admin.listen or --pprof beyond loopback.
func TestMetricsBeyondLoopbackAndNothingElse(t *testing.T) {
	env, ctx := newEnv(t, eventsConfig)
	l, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	if err := env.StartPluginEvents(ctx, "--metrics-listen", fmt.Sprintf("0.0.0.0:%d", port), "--pprof", "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	node := nodeAddress(t)
	metricsURL := fmt.Sprintf("http://%s", net.JoinHostPort(node.String(), fmt.Sprint(port)))
	// the client's source is the node address too: a request from beyond loopback
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: (&net.Dialer{
		LocalAddr: &net.TCPAddr{IP: node.AsSlice()}}).DialContext}}
	resp, err := client.Get(metricsURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `nri_hcn_portmap_build_info{goversion="go`) {
		t.Fatalf("GET /metrics from %s = %d, build_info missing:\n%.500s", node, resp.StatusCode, body)
	}
	for _, r := range []struct{ method, path string }{
		{http.MethodPost, "/reload"}, {http.MethodGet, "/mappings"}, {http.MethodGet, "/healthz"}, {http.MethodGet, "/debug/pprof/"},
	} {
		req, _ := http.NewRequestWithContext(ctx, r.method, metricsURL+r.path, nil)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("%s %s from %s = %d, want 404: only /metrics listens beyond loopback", r.method, r.path, node, resp.StatusCode)
		}
	}
	// the admin address is loopback: not reachable at the node address
	_, adminPort, _ := net.SplitHostPort(env.AdminAddr)
	if c, err := net.DialTimeout("tcp", net.JoinHostPort(node.String(), adminPort), 2*time.Second); err == nil {
		c.Close()
		t.Errorf("the admin port %s answers at the node address %s", adminPort, node)
	}
	if rep := scrape(t, env); rep[`nri_hcn_portmap_config_reloads_total{result="applied"}`] != 0 {
		t.Errorf("a reload happened: %v", rep[`nri_hcn_portmap_config_reloads_total{result="applied"}`])
	}

	for _, args := range [][]string{
		{"--admin-listen", fmt.Sprintf("0.0.0.0:%d", port)},
		{"--pprof", fmt.Sprintf("%s:0", node)},
	} {
		_, stderr, err := env.Command(ctx, "run", args...)
		if err == nil || !strings.Contains(stderr, "must be a loopback address") {
			t.Errorf("run %v: %v\n%s\nwant it refused: only loopback", args, err, stderr)
		}
	}
}
