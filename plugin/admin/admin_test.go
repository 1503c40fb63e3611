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

	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/nodefs"
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

// POST /reload changes what the plugin does: the loopback listener, which
// every local user reaches, refuses it from any address, loopback
// included; the private channel (admin.socket) reloads. Reads are
// answered on both.
func TestReloadOnlyOnThePrivateChannel(t *testing.T) {
	for _, remote := range []string{"127.0.0.1:50000", "[::1]:50000", "10.0.0.5:50000", "@"} {
		reloads := 0
		a := newAdmin(&reloads)
		for _, tc := range []struct {
			name string
			h    http.Handler
			want int
		}{{"loopback listener", a.Handler(), http.StatusForbidden}, {"private channel", a.PrivateHandler(), http.StatusOK}} {
			req := httptest.NewRequest(http.MethodPost, "/reload", nil)
			req.RemoteAddr = remote
			rec := httptest.NewRecorder()
			tc.h.ServeHTTP(rec, req)
			if rec.Code != tc.want {
				t.Fatalf("%s: POST /reload from %s = %d %s, want %d", tc.name, remote, rec.Code, rec.Body, tc.want)
			}
			if tc.want == http.StatusForbidden && !strings.Contains(rec.Body.String(), "admin.socket") {
				t.Errorf("%s: the refusal does not say where: %s", tc.name, rec.Body)
			}
			get := httptest.NewRequest(http.MethodGet, "/metrics", nil)
			get.RemoteAddr = remote
			rec = httptest.NewRecorder()
			tc.h.ServeHTTP(rec, get)
			if rec.Code != http.StatusOK {
				t.Errorf("%s: GET /metrics from %s = %d", tc.name, remote, rec.Code)
			}
		}
		if reloads != 1 {
			t.Errorf("from %s: %d reloads, want 1 (the private channel's)", remote, reloads)
		}
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

// The Windows pipe's DACL admits the node's administrators alone: judged as
// the configuration file's is (nodefs.Writers, on the SDDL string).
func TestThePrivatePipeIsTheAdministratorsAlone(t *testing.T) {
	who, err := nodefs.Writers(PrivatePipeSDDL, "")
	if err != nil || len(who) != 0 {
		t.Fatalf("the pipe's DACL %s admits %q (%v), want SYSTEM and Administrators alone", PrivatePipeSDDL, who, err)
	}
	if who, _ := nodefs.Writers("O:SYD:P(A;;GA;;;BA)(A;;GA;;;SY)(A;;GRGW;;;AU)", ""); len(who) != 1 {
		t.Fatalf("a DACL that also admits Authenticated Users: %q, want it named", who)
	}
}
