// Command nri-hcn-portmap is a containerd NRI plugin for Windows nodes that
// gives pod sandboxes HNS v2 PortMapping endpoints in their own HCN
// namespace. This file only wires: flags, configuration, logging, backends.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"path/filepath"
	"reflect"
	"runtime"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/cmd/nri-hcn-portmap/service"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/config"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn/hcnsim"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/admission"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/logfile"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/telemetry"
)

var version = "dev"

const usage = `nri-hcn-portmap: HNS v2 port mappings for containerd pods on Windows

Usage:
  nri-hcn-portmap [run] [flags]        run the plugin (default; under the Windows SCM, as a service)
  nri-hcn-portmap status [flags] [-o table|json]
                                       the endpoints the plugin manages, from HCN and containerd
  nri-hcn-portmap health [flags]       ask the running plugin's /healthz (exit 1 when unhealthy)
  nri-hcn-portmap reload [flags]       make the running plugin re-read its configuration
  nri-hcn-portmap cleanup [flags]      detach and delete every endpoint the plugin created
  nri-hcn-portmap service install --config PATH | service uninstall
                                       register or remove the Windows service
  nri-hcn-portmap simulator --listen ADDR
                                       run the HNS simulator (for Linux tests and demos)
  nri-hcn-portmap version

Run "nri-hcn-portmap run -h" for the flags.
`

// defaultServiceLog is where a service logs when log.file is not set.
var defaultServiceLog = filepath.Join(os.Getenv("ProgramData"), "nri-hcn-portmap", "nri-hcn-portmap.log")

func main() {
	os.Exit(mainArgs(os.Args[1:], os.Stdout, os.Stderr))
}

func mainArgs(args []string, stdout, stderr io.Writer) int {
	cmd := "run"
	if len(args) > 0 && len(args[0]) > 0 && args[0][0] != '-' {
		cmd, args = args[0], args[1:]
	}
	var err error
	switch cmd {
	case "run":
		err = runCmd(args, stderr)
	case "status":
		err = statusCmd(args, stdout, stderr)
	case "health":
		err = adminCmd("health", args, stdout, stderr)
	case "reload":
		err = adminCmd("reload", args, stdout, stderr)
	case "cleanup":
		err = cleanupCmd(args, stdout, stderr)
	case "service":
		err = serviceCmd(args, stdout, stderr)
	case "simulator":
		err = simulatorCmd(args, stderr)
	case "version":
		fmt.Fprintln(stdout, "nri-hcn-portmap", version)
	case "help":
		fmt.Fprint(stdout, usage)
	default:
		fmt.Fprintf(stderr, "unknown command %q\n\n%s", cmd, usage)
		return 2
	}
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "nri-hcn-portmap:", err)
		return 1
	}
	return 0
}

func newLogger(cfg config.Log, out io.Writer) (*logrus.Logger, io.Closer, error) {
	l := logrus.New()
	var closer io.Closer = io.NopCloser(nil)
	if cfg.File != "" {
		w, err := logfile.Open(cfg.File, int64(cfg.MaxSizeMB)<<20, cfg.MaxFiles)
		if err != nil {
			return nil, nil, err
		}
		out, closer = w, w
	}
	l.SetOutput(out)
	lvl, err := logrus.ParseLevel(cfg.Level)
	if err != nil {
		return nil, nil, err
	}
	l.SetLevel(lvl)
	if cfg.Format == "json" {
		l.SetFormatter(&logrus.JSONFormatter{})
	} else {
		l.SetFormatter(&logrus.TextFormatter{FullTimestamp: true})
	}
	return l, closer, nil
}

func newService(cfg config.HCN) (hcn.Service, error) {
	switch cfg.Backend {
	case config.BackendSimulated:
		return hcnsim.NewClient(cfg.SimulatorAddress)
	default:
		return hcn.NewWindowsService()
	}
}

func newManager(cfg config.HCN, observe hcn.ObserveFunc) (*hcn.Manager, error) {
	svc, err := newService(cfg)
	if err != nil {
		return nil, fmt.Errorf("hcn backend %q: %w", cfg.Backend, err)
	}
	svc = hcn.Bounded(svc, cfg.CallTimeout.Duration)
	if observe != nil {
		svc = hcn.Instrumented(svc, observe)
	}
	return hcn.NewManager(svc, hcn.ManagerConfig{
		Network: hcn.NetworkSpec{Name: cfg.Network, Type: hcn.NetworkType(cfg.NetworkType), Subnet: cfg.Subnet,
			Gateway: cfg.Gateway, Adapter: cfg.Adapter},
		CreateNetwork: cfg.CreateNetwork,
		OutboundNAT:   cfg.OutboundNAT,
	}), nil
}

func parse(name string, args []string, stderr io.Writer, extra func(fs *flag.FlagSet)) (config.Config, *config.Flags, error) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	flags := config.RegisterFlags(fs)
	if extra != nil {
		extra(fs)
	}
	if err := fs.Parse(args); err != nil {
		return config.Config{}, nil, err
	}
	if fs.NArg() > 0 {
		return config.Config{}, nil, fmt.Errorf("%s: unexpected argument %q", name, fs.Arg(0))
	}
	cfg, err := flags.Resolve()
	return cfg, flags, err
}

func runCmd(args []string, stderr io.Writer) error {
	var pprofAddr string
	cfg, flags, err := parse("run", args, stderr, func(fs *flag.FlagSet) {
		fs.StringVar(&pprofAddr, "pprof", "", "serve Go profiles (net/http/pprof) on this address, e.g. 127.0.0.1:6060; off when empty")
	})
	if err != nil {
		return err
	}
	isService, err := service.IsService()
	if err != nil {
		return err
	}
	if isService && cfg.Log.File == "" {
		cfg.Log.File = defaultServiceLog // a service has no console
	}
	logger, closeLog, err := newLogger(cfg.Log, stderr)
	if err != nil {
		return err
	}
	defer closeLog.Close()
	log := logrus.NewEntry(logger)
	if pprofAddr != "" {
		go servePprof(pprofAddr, log)
	}
	app, err := build(cfg, flags, log)
	if err != nil {
		log.WithError(err).Error("nri-hcn-portmap cannot start")
		return err
	}
	if isService {
		log.Info("running as a Windows service")
		return service.Run(service.Name, app.run, func() { _, _ = app.reload() })
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	go func() {
		for range hup {
			_, _ = app.reload()
		}
	}()
	return app.run(ctx)
}

// app is the wired plugin.
type app struct {
	cfg     config.Config
	flags   *config.Flags
	log     *logrus.Entry
	core    *plugin.Core
	store   *plugin.ContainerdStore
	srcs    *plugin.Sources
	admin   *plugin.Admin
	metrics *telemetry.Metrics
	reloads sync.Mutex // one reload at a time (SIGHUP, /reload, SCM)
}

func build(cfg config.Config, flags *config.Flags, log *logrus.Entry) (*app, error) {
	a := &app{cfg: cfg, flags: flags, log: log}
	var mgr *hcn.Manager
	a.metrics = telemetry.New(func() float64 { return float64(mgr.KnownCount()) })
	mgr, err := newManager(cfg.HCN, a.metrics.HCNCall)
	if err != nil {
		return nil, err
	}
	policy, err := admission.Compile(cfg.Admission)
	if err != nil {
		return nil, err // Resolve validated it already
	}
	a.store = plugin.NewContainerdStore(cfg.Containerd.Address, cfg.Containerd.Namespace)
	a.core = plugin.NewCore(mgr, a.store, plugin.Options{
		Policy:    hcn.PolicyOptions{LocalRoutedVIP: cfg.HCN.LocalRoutedVIP, DualStack: cfg.HCN.DualStack},
		Sources:   plugin.MappingSources{Annotations: cfg.Plugin.UsesMappings(config.MappingsAnnotations), CRI: cfg.Plugin.UsesMappings(config.MappingsCRI)},
		Limits:    plugin.Limits{MaxMappings: cfg.Plugin.MaxMappingsPerPod, MaxBytes: cfg.Plugin.MaxAnnotationBytes},
		Admission: policy.WithDualStack(cfg.HCN.DualStack),
		Deadline:  cfg.Plugin.Deadline.Duration,
		FailOpen:  cfg.Plugin.FailurePolicy == config.FailOpen,
		RetryMax:  cfg.HCN.RetryMax.Duration,
		Observer:  a.metrics,
	}, log)
	resync := plugin.NewResyncer(a.core, cfg.Plugin.ResyncInterval.Duration, log)
	a.srcs = &plugin.Sources{
		Mode: cfg.Plugin.Source,
		NRI: plugin.NewNRISource(a.core, plugin.NRIConfig{Socket: cfg.NRI.Socket, PluginName: cfg.NRI.PluginName,
			PluginIndex: cfg.NRI.PluginIndex, ReconnectMax: cfg.NRI.ReconnectMax.Duration,
			FailClosed: cfg.Plugin.FailurePolicy == config.FailClosed}, log),
		Events:           plugin.NewEventSource(a.core, a.store, resync, cfg.NRI.ReconnectMax.Duration, log),
		Resync:           resync,
		NRISocketExists:  func() bool { _, err := os.Stat(cfg.NRI.Socket); return err == nil },
		RegistrationWait: 6 * time.Second,
		EventsWithNRI:    runtime.GOOS == "windows",
		Log:              log,
	}
	a.admin = &plugin.Admin{
		Checks: []plugin.HealthCheck{
			{Name: "event source", Check: a.srcs.Health},
			{Name: "containerd", Check: func(ctx context.Context) error {
				c, err := a.store.Client()
				if err != nil {
					return err
				}
				_, err = c.Version(ctx)
				return err
			}},
			{Name: "hcn", Check: func(ctx context.Context) error {
				_, err := mgr.Service().GetNetworkByName(ctx, cfg.HCN.Network)
				if errors.Is(err, hcn.ErrNotFound) && cfg.HCN.CreateNetwork {
					return nil // reachable; the network comes with the first endpoint
				}
				return err
			}},
		},
		Metrics: a.metrics.Handler(),
		Reload:  a.reload,
		Log:     log,
	}
	return a, nil
}

// run runs the plugin until ctx ends; in-flight HCN work then finishes or
// rolls back before it returns.
func (a *app) run(ctx context.Context) error {
	defer a.store.Close()
	defer a.core.Close()
	{
		lctx, cancel := context.WithTimeout(ctx, a.cfg.HCN.CallTimeout.Duration)
		if err := a.core.LoadPorts(lctx); err != nil {
			a.log.WithError(err).Warn("could not read our endpoints from HCN at start; the first resync will")
		}
		cancel()
	}
	if a.cfg.Admin.Listen != "" {
		go func() {
			if err := a.admin.Serve(ctx, a.cfg.Admin.Listen); err != nil {
				a.log.WithError(err).Error("admin endpoints unavailable")
			}
		}()
	}
	a.log.WithFields(logrus.Fields{"version": version, "backend": a.cfg.HCN.Backend, "network": a.cfg.HCN.Network,
		"containerd": a.cfg.Containerd.Address, "nri_socket": a.cfg.NRI.Socket, "source": a.cfg.Plugin.Source,
		"mapping_sources": fmt.Sprint(a.cfg.Plugin.MappingSources), "failure_policy": a.cfg.Plugin.FailurePolicy,
		"deadline": a.cfg.Plugin.Deadline.String(), "admin": a.cfg.Admin.Listen}).Info("nri-hcn-portmap starting")
	err := a.srcs.Run(ctx)
	a.log.Info("nri-hcn-portmap stopping: finishing in-flight work")
	return err
}

// reload re-reads the configuration file (and flags): the admission policy
// applies to new pods at once; other changes need a restart, and are named.
// An invalid file is rejected and the running configuration stays.
func (a *app) reload() (string, error) {
	a.reloads.Lock()
	defer a.reloads.Unlock()
	next, err := a.flags.Resolve()
	if err != nil {
		a.metrics.Reloaded(false)
		a.log.WithError(err).Error("configuration reload rejected; the running configuration stays in force")
		return "", err
	}
	policy, err := admission.Compile(next.Admission)
	if err != nil {
		a.metrics.Reloaded(false)
		return "", err
	}
	a.core.SetAdmission(policy.WithDualStack(a.cfg.HCN.DualStack))
	msg := "admission policy applied to new pods"
	if pending := restartNeeded(a.cfg, next); len(pending) > 0 {
		msg += "; changes to " + strings.Join(pending, ", ") + " take effect after a restart"
	}
	a.cfg.Admission = next.Admission
	a.metrics.Reloaded(true)
	a.log.WithField("result", msg).Info("configuration reloaded")
	return msg, nil
}

func restartNeeded(old, next config.Config) []string {
	var out []string
	ov, nv := reflect.ValueOf(old), reflect.ValueOf(next)
	t := ov.Type()
	for i := range t.NumField() {
		name := t.Field(i).Tag.Get("toml")
		if name == "admission" {
			continue
		}
		if !reflect.DeepEqual(ov.Field(i).Interface(), nv.Field(i).Interface()) {
			out = append(out, "["+name+"]")
		}
	}
	sort.Strings(out)
	return out
}

func statusCmd(args []string, stdout, stderr io.Writer) error {
	var format string
	cfg, _, err := parse("status", args, stderr, func(fs *flag.FlagSet) {
		fs.StringVar(&format, "o", "table", "output format: table or json")
	})
	if err != nil {
		return err
	}
	mgr, err := newManager(cfg.HCN, nil)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.HCN.CallTimeout.Duration)
	defer cancel()
	eps, err := mgr.Owned(ctx)
	if err != nil {
		return err
	}
	store := plugin.NewContainerdStore(cfg.Containerd.Address, cfg.Containerd.Namespace)
	defer store.Close()
	var sbs plugin.SandboxStore = store
	if _, err := store.Client(); err != nil {
		fmt.Fprintln(stderr, "nri-hcn-portmap: containerd unreachable, pod names not shown:", err)
		sbs = nil
	}
	return plugin.WriteStatus(stdout, plugin.StatusEntries(ctx, mgr, sbs, eps), format)
}

// adminCmd asks the running plugin's admin endpoint.
func adminCmd(what string, args []string, stdout, stderr io.Writer) error {
	cfg, _, err := parse(what, args, stderr, nil)
	if errors.Is(err, flag.ErrHelp) {
		return err
	}
	if err != nil {
		// A file the running plugin would reject must not keep us from
		// asking it: it answers for itself (a reload is then rejected
		// there, and counted). The address comes from the flag, the file or
		// the default.
		fmt.Fprintln(stderr, "nri-hcn-portmap: warning:", err)
		if cfg.Admin.Listen == "" {
			cfg.Admin.Listen = config.Default().Admin.Listen
		}
	}
	if cfg.Admin.Listen == "" {
		return errors.New("admin.listen is empty: the plugin serves no admin endpoints")
	}
	url := "http://" + cfg.Admin.Listen
	client := &http.Client{Timeout: 10 * time.Second}
	var res *http.Response
	if what == "health" {
		res, err = client.Get(url + "/healthz")
	} else {
		res, err = client.Post(url+"/reload", "application/json", nil)
	}
	if err != nil {
		return fmt.Errorf("%s: the plugin's admin endpoint %s: %w", what, cfg.Admin.Listen, err)
	}
	defer res.Body.Close()
	_, _ = io.Copy(stdout, res.Body)
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", what, res.Status)
	}
	return nil
}

// cleanupCmd removes every endpoint the plugin created (for uninstall).
func cleanupCmd(args []string, stdout, stderr io.Writer) error {
	cfg, _, err := parse("cleanup", args, stderr, nil)
	if err != nil {
		return err
	}
	mgr, err := newManager(cfg.HCN, nil)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	eps, err := mgr.Owned(ctx)
	if err != nil {
		return err
	}
	var errs []error
	for _, ep := range eps {
		if err := mgr.RemoveEndpoint(ctx, ep); err != nil {
			errs = append(errs, err)
			continue
		}
		fmt.Fprintf(stdout, "removed %s (%s)\n", ep.Name, ep.ID)
	}
	fmt.Fprintf(stdout, "%d of %d endpoints removed\n", len(eps)-len(errs), len(eps))
	return errors.Join(errs...)
}

func serviceCmd(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return errors.New("service: want install or uninstall")
	}
	switch args[0] {
	case "install":
		fs := flag.NewFlagSet("service install", flag.ContinueOnError)
		fs.SetOutput(stderr)
		cfgPath := fs.String("config", "", "configuration file the service runs with (absolute path)")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		if *cfgPath != "" {
			if _, err := config.Load(*cfgPath); err != nil {
				return err
			}
		}
		exe, err := os.Executable()
		if err != nil {
			return err
		}
		plan, err := service.InstallPlan(exe, *cfgPath)
		if err != nil {
			return err
		}
		if err := service.Install(plan); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "service %s installed (%s %s); start it with: sc.exe start %s\n", plan.Name, plan.Exe, strings.Join(plan.Args, " "), plan.Name)
		return nil
	case "uninstall":
		if err := service.Uninstall(service.Name); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "service %s removed; run `nri-hcn-portmap cleanup` to delete the endpoints it created\n", service.Name)
		return nil
	}
	return fmt.Errorf("service: unknown subcommand %q (want install or uninstall)", args[0])
}

func simulatorCmd(args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("simulator", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "", "address to serve on: unix:///path or tcp://127.0.0.1:port")
	if err := fs.Parse(args); err != nil {
		return err
	}
	l, err := hcnsim.Listen(*listen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: hcnsim.Handler(hcnsim.New()), ReadHeaderTimeout: 5 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	fmt.Fprintln(stderr, "hcn simulator listening on", *listen)
	if err := srv.Serve(l); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

func servePprof(addr string, log *logrus.Entry) {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	log.WithField("address", addr).Info("serving Go profiles")
	if err := srv.ListenAndServe(); err != nil {
		log.WithError(err).Error("pprof server stopped")
	}
}
