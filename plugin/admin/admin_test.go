package admin

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
)

func newAdmin(reloads *int) *Admin {
	return &Admin{
		Metrics: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			_, _ = io.WriteString(w, "nri_hcn_portmap_build_info 1\n")
		}),
		Mappings: func() any { return []string{} },
		Reload:   func() (string, error) { *reloads++; return "applied", nil },
		Log:      logrus.NewEntry(logrus.New()),
	}
}

// POST /reload changes what the plugin does: it is answered only from the
// node itself, whatever address the listener has. Reads are answered from
// anywhere the listener is reachable.
func TestReloadOnlyFromLoopback(t *testing.T) {
	for _, tt := range []struct {
		remote string
		want   int
	}{
		{"127.0.0.1:50000", http.StatusOK},
		{"127.0.0.53:50000", http.StatusOK},
		{"[::1]:50000", http.StatusOK},
		{"[::ffff:127.0.0.1]:50000", http.StatusOK},
		{"10.0.0.5:50000", http.StatusForbidden},
		{"[fd00::5]:50000", http.StatusForbidden},
		{"[::ffff:10.0.0.5]:50000", http.StatusForbidden},
		{"garbage", http.StatusForbidden},
	} {
		t.Run(tt.remote, func(t *testing.T) {
			reloads := 0
			h := newAdmin(&reloads).Handler()
			req := httptest.NewRequest(http.MethodPost, "/reload", nil)
			req.RemoteAddr = tt.remote
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != tt.want {
				t.Fatalf("POST /reload from %s = %d %s, want %d", tt.remote, rec.Code, rec.Body, tt.want)
			}
			if wantReloads := map[bool]int{true: 1, false: 0}[tt.want == http.StatusOK]; reloads != wantReloads {
				t.Errorf("reloads %d, want %d", reloads, wantReloads)
			}
			get := httptest.NewRequest(http.MethodGet, "/metrics", nil)
			get.RemoteAddr = tt.remote
			rec = httptest.NewRecorder()
			h.ServeHTTP(rec, get)
			if rec.Code != http.StatusOK {
				t.Errorf("GET /metrics from %s = %d", tt.remote, rec.Code)
			}
		})
	}
}

// The metrics listener serves GET /metrics and nothing else.
func TestMetricsHandlerServesMetricsAlone(t *testing.T) {
	reloads := 0
	h := newAdmin(&reloads).MetricsHandler()
	for _, tt := range []struct {
		method, path string
		want         int
	}{
		{http.MethodGet, "/metrics", http.StatusOK},
		{http.MethodPost, "/reload", http.StatusNotFound},
		{http.MethodGet, "/healthz", http.StatusNotFound},
		{http.MethodGet, "/livez", http.StatusNotFound},
		{http.MethodGet, "/mappings", http.StatusNotFound},
		{http.MethodGet, "/debug/pprof/", http.StatusNotFound},
		{http.MethodPost, "/metrics", http.StatusMethodNotAllowed},
	} {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			req := httptest.NewRequest(tt.method, tt.path, nil)
			req.RemoteAddr = "127.0.0.1:50000" // even from the node
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != tt.want {
				t.Fatalf("%s %s = %d, want %d", tt.method, tt.path, rec.Code, tt.want)
			}
			if tt.want == http.StatusOK && !strings.Contains(rec.Body.String(), "build_info") {
				t.Errorf("body %q", rec.Body)
			}
		})
	}
	if reloads != 0 {
		t.Errorf("the metrics listener reloaded %d times", reloads)
	}
}

// Unit (issue 29): the metrics listener itself, as ServeMetrics runs it on
// its own address, serves GET /metrics and nothing else (the handler alone
// is tested above; this is what admin.metrics_listen binds).
func TestServeMetricsListensForMetricsAlone(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	reloads := 0
	a := newAdmin(&reloads)
	a.Checks = []HealthCheck{{Name: "x", Check: func(context.Context) error { return nil }}}
	served := make(chan error, 1)
	go func() { served <- a.ServeMetrics(ctx, l) }()
	get := func(method, path string) int {
		for range 100 {
			req, _ := http.NewRequest(method, "http://"+addr+path, nil)
			res, err := http.DefaultClient.Do(req)
			if err == nil {
				res.Body.Close()
				return res.StatusCode
			}
			select {
			case err := <-served:
				t.Fatalf("ServeMetrics: %v", err)
			default:
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Fatalf("nothing listens on %s", addr)
		return 0
	}
	for _, tt := range []struct {
		method, path string
		want         int
	}{
		{http.MethodGet, "/metrics", http.StatusOK},
		{http.MethodGet, "/healthz", http.StatusNotFound},
		{http.MethodGet, "/livez", http.StatusNotFound},
		{http.MethodGet, "/mappings", http.StatusNotFound},
		{http.MethodPost, "/reload", http.StatusNotFound},
	} {
		if got := get(tt.method, tt.path); got != tt.want {
			t.Errorf("%s %s on the metrics listener = %d, want %d", tt.method, tt.path, got, tt.want)
		}
	}
	if reloads != 0 {
		t.Errorf("the metrics listener reloaded %d times", reloads)
	}
	cancel()
	if err := <-served; err != nil {
		t.Fatalf("ServeMetrics after its context ended: %v", err)
	}
}
