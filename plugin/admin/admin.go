// Package admin serves the plugin's operator endpoints: what reads
// (/healthz, a set of named checks run in parallel; /livez, /metrics,
// /mappings) on a loopback address; what changes what the plugin does
// (POST /reload) on a channel for the node's administrators alone (a named
// pipe whose DACL admits SYSTEM and Administrators, or a unix socket only
// root may reach: ListenPrivate); and /metrics alone on a second address
// for Prometheus.
package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/config"
)

// PrivatePipeSDDL is the security descriptor of admin.socket's named pipe
// on Windows: owned by Administrators (which only SYSTEM or an elevated
// administrator may set: their tokens hold the group as an owner; the
// client checks it, PipeOwnerTrusted), and SYSTEM and Administrators alone
// may connect. The DACL is the one containerd gives its stack-dump event
// (cmd/containerd/server, v2.4.2); containerd's own gRPC pipe takes
// go-winio's default DACL instead (pkg/sys/socket_windows.go:
// ListenPipe(path, nil)).
const PrivatePipeSDDL = "O:BAD:P(A;;GA;;;BA)(A;;GA;;;SY)"

// HealthCheck is one thing /healthz checks.
type HealthCheck struct {
	Name  string
	Check func(ctx context.Context) error
}

// ReloadFunc re-reads the configuration and applies what it can; it
// returns what happened, or why the new configuration was rejected.
type ReloadFunc func() (string, error)

// Admin serves /healthz, /metrics and POST /reload for operators.
type Admin struct {
	Checks []HealthCheck // /healthz: readiness, everything the plugin needs
	// Live are the checks of /livez: the process serves and its loops
	// run. They ask neither HNS nor containerd, so a node whose network is
	// missing or whose containerd restarts is not-ready, not restarted.
	Live    []HealthCheck
	Metrics http.Handler
	// Mappings, when set, is GET /mappings: who maps each host port of
	// each pod, as the plugin knows it (for `status`).
	Mappings func() any
	Reload   ReloadFunc
	Log      *logrus.Entry
	Timeout  time.Duration // per check; 2 s when zero
	// Key proves the answers on admin.listen and admin.socket are the
	// plugin's (proof.go); nil: none are proved
	Key []byte
}

// HealthReport is the body of /healthz.
type HealthReport struct {
	Status string            `json:"status"` // ok or unhealthy
	Checks map[string]string `json:"checks"` // name -> ok or the reason
}

// Health runs every check of /healthz in parallel.
func (a *Admin) Health(ctx context.Context) HealthReport { return a.run(ctx, a.Checks) }

// Liveness runs the checks of /livez.
func (a *Admin) Liveness(ctx context.Context) HealthReport { return a.run(ctx, a.Live) }

func (a *Admin) run(ctx context.Context, checks []HealthCheck) HealthReport {
	timeout := a.Timeout
	if timeout <= 0 {
		timeout = config.HealthCheckTimeout
	}
	rep := HealthReport{Status: "ok", Checks: map[string]string{}}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, c := range checks {
		wg.Go(func() {
			cctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			err := c.Check(cctx)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				rep.Status = "unhealthy"
				rep.Checks[c.Name] = err.Error()
			} else {
				rep.Checks[c.Name] = "ok"
			}
		})
	}
	wg.Wait()
	return rep
}

// Handler routes the admin endpoints.
func (a *Admin) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /livez", func(w http.ResponseWriter, r *http.Request) {
		rep := a.Liveness(r.Context())
		code := http.StatusOK
		if rep.Status != "ok" {
			code = http.StatusServiceUnavailable
		}
		writeJSON(w, code, rep)
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		rep := a.Health(r.Context())
		code := http.StatusOK
		if rep.Status != "ok" {
			code = http.StatusServiceUnavailable
			names := make([]string, 0, len(rep.Checks))
			for n, v := range rep.Checks {
				if v != "ok" {
					names = append(names, n)
				}
			}
			sort.Strings(names)
			a.Log.WithField("failing", names).Warn("health check failed")
		}
		writeJSON(w, code, rep)
	})
	if a.Metrics != nil {
		mux.Handle("GET /metrics", a.Metrics)
	}
	if a.Mappings != nil {
		mux.HandleFunc("GET /mappings", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, http.StatusOK, a.Mappings()) })
	}
	mux.HandleFunc("POST /reload", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusForbidden, map[string]string{"result": "refused",
			"error": "POST /reload is answered on admin.socket alone, for the node's administrators: run nri-hcn-portmap reload as one"})
	})
	return mux
}

// PrivateHandler routes every admin endpoint, POST /reload included: what
// ListenPrivate's channel serves.
func (a *Admin) PrivateHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /", a.Handler())
	mux.HandleFunc("POST /reload", func(w http.ResponseWriter, r *http.Request) {
		if a.Reload == nil {
			writeJSON(w, http.StatusNotImplemented, map[string]string{"result": "unsupported"})
			return
		}
		msg, err := a.Reload()
		if err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"result": "rejected", "error": err.Error()})
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"result": "applied", "message": msg})
	})
	return mux
}

// MetricsHandler serves GET /metrics and nothing else: what may listen
// beyond loopback (admin.metrics_listen).
func (a *Admin) MetricsHandler() http.Handler {
	mux := http.NewServeMux()
	if a.Metrics != nil {
		mux.Handle("GET /metrics", a.Metrics)
	}
	return mux
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// Listen binds addr for Serve or ServeMetrics: the plugin binds its
// addresses before it registers with the runtime, so that whoever sees it
// registered finds it answering.
// A port another program holds is an error naming it where the OS says
// who (heldBy).
func Listen(addr string) (net.Listener, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, withHolder(err, addr)
	}
	return l, nil
}

// ErrPortForbidden: the OS forbids binding the port and no program holds
// it: on Windows a port in a range the node excludes (Hyper-V and WinNAT
// reserve dynamic ranges at boot; netsh int ipv4 show excludedportrange).
var ErrPortForbidden = errors.New("the node forbids binding the port")

// withHolder adds to err who holds addr's port, where the OS says; a bind
// the OS forbids with no holder is ErrPortForbidden, saying where to look.
func withHolder(err error, addr string) error {
	_, p, perr := net.SplitHostPort(addr)
	port, nerr := strconv.ParseUint(p, 10, 16)
	if perr != nil || nerr != nil {
		return err
	}
	if who := heldBy(uint16(port)); who != "" {
		return fmt.Errorf("%w (held by %s)", err, who)
	}
	if where := excludedBy(err); where != "" {
		return fmt.Errorf("%w: port %d, and no program holds it (%s): %w", ErrPortForbidden, port, where, err)
	}
	return err
}

// Serve serves the admin endpoints on l until ctx ends.
func (a *Admin) Serve(ctx context.Context, l net.Listener) error {
	return a.serve(ctx, l, proving(a.Key, a.Handler()), "serving /healthz, /livez, /metrics, /mappings and /reload")
}

// ServePrivate serves every admin endpoint, POST /reload included, on l
// (ListenPrivate's) until ctx ends.
func (a *Admin) ServePrivate(ctx context.Context, l net.Listener) error {
	return a.serve(ctx, l, proving(a.Key, a.PrivateHandler()), "serving POST /reload for the node's administrators")
}

// ServeMetrics serves GET /metrics alone on l until ctx ends.
func (a *Admin) ServeMetrics(ctx context.Context, l net.Listener) error {
	return a.serve(ctx, l, a.MetricsHandler(), "serving /metrics")
}

func (a *Admin) serve(ctx context.Context, l net.Listener, h http.Handler, what string) error {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: config.AdminReadHeaderTimeout}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), config.AdminShutdownGrace)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	a.Log.WithField("address", l.Addr().String()).Info(what)
	if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
