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
	"runtime"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/config"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn/hcnsim"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/admission"
)

var version = "dev"

const usage = `nri-hcn-portmap: HNS v2 port mappings for containerd pods on Windows

Usage:
  nri-hcn-portmap [run] [flags]        run the plugin (default)
  nri-hcn-portmap status [flags] [-o table|json]
                                       list the endpoints the plugin manages, read from HCN
  nri-hcn-portmap simulator --listen ADDR
                                       run the HNS simulator (for Linux tests and demos)
  nri-hcn-portmap version

Run "nri-hcn-portmap run -h" for the flags.
`

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

func newLogger(cfg config.Log, out io.Writer) (*logrus.Logger, error) {
	l := logrus.New()
	l.SetOutput(out)
	lvl, err := logrus.ParseLevel(cfg.Level)
	if err != nil {
		return nil, err
	}
	l.SetLevel(lvl)
	if cfg.Format == "json" {
		l.SetFormatter(&logrus.JSONFormatter{})
	} else {
		l.SetFormatter(&logrus.TextFormatter{FullTimestamp: true})
	}
	return l, nil
}

func newService(cfg config.HCN) (hcn.Service, error) {
	switch cfg.Backend {
	case config.BackendSimulated:
		return hcnsim.NewClient(cfg.SimulatorAddress)
	default:
		return hcn.NewWindowsService()
	}
}

func newManager(cfg config.HCN) (*hcn.Manager, error) {
	svc, err := newService(cfg)
	if err != nil {
		return nil, fmt.Errorf("hcn backend %q: %w", cfg.Backend, err)
	}
	return hcn.NewManager(hcn.Bounded(svc, cfg.CallTimeout.Duration), hcn.ManagerConfig{
		Network: hcn.NetworkSpec{Name: cfg.Network, Type: hcn.NetworkType(cfg.NetworkType), Subnet: cfg.Subnet,
			Gateway: cfg.Gateway, Adapter: cfg.Adapter},
		CreateNetwork: cfg.CreateNetwork,
		OutboundNAT:   cfg.OutboundNAT,
	}), nil
}

func parse(name string, args []string, stderr io.Writer, extra func(fs *flag.FlagSet)) (config.Config, error) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	flags := config.RegisterFlags(fs)
	if extra != nil {
		extra(fs)
	}
	if err := fs.Parse(args); err != nil {
		return config.Config{}, err
	}
	if fs.NArg() > 0 {
		return config.Config{}, fmt.Errorf("%s: unexpected argument %q", name, fs.Arg(0))
	}
	return flags.Resolve()
}

func runCmd(args []string, stderr io.Writer) error {
	var pprofAddr string
	cfg, err := parse("run", args, stderr, func(fs *flag.FlagSet) {
		fs.StringVar(&pprofAddr, "pprof", "", "serve Go profiles (net/http/pprof) on this address, e.g. 127.0.0.1:6060; off when empty")
	})
	if err != nil {
		return err
	}
	logger, err := newLogger(cfg.Log, stderr)
	if err != nil {
		return err
	}
	log := logrus.NewEntry(logger)
	if pprofAddr != "" {
		go servePprof(pprofAddr, log)
	}
	mgr, err := newManager(cfg.HCN)
	if err != nil {
		return err
	}
	store := plugin.NewContainerdStore(cfg.Containerd.Address, cfg.Containerd.Namespace)
	defer store.Close()
	policy, err := admission.Compile(cfg.Admission)
	if err != nil {
		return err // Resolve validated it already
	}
	core := plugin.NewCore(mgr, store, plugin.Options{
		Policy:    hcn.PolicyOptions{LocalRoutedVIP: cfg.HCN.LocalRoutedVIP, DualStack: cfg.HCN.DualStack},
		Sources:   plugin.MappingSources{Annotations: cfg.Plugin.UsesMappings(config.MappingsAnnotations), CRI: cfg.Plugin.UsesMappings(config.MappingsCRI)},
		Admission: policy.WithDualStack(cfg.HCN.DualStack),
		Deadline:  cfg.Plugin.Deadline.Duration,
		FailOpen:  cfg.Plugin.FailurePolicy == config.FailOpen,
		RetryMax:  cfg.HCN.RetryMax.Duration,
	}, log)
	defer core.Close()
	{
		lctx, cancel := context.WithTimeout(context.Background(), cfg.HCN.CallTimeout.Duration)
		if err := core.LoadPorts(lctx); err != nil {
			log.WithError(err).Warn("could not read our endpoints from HCN at start; the first resync will")
		}
		cancel()
	}
	resync := plugin.NewResyncer(core, cfg.Plugin.ResyncInterval.Duration, log)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log.WithFields(logrus.Fields{"version": version, "backend": cfg.HCN.Backend, "network": cfg.HCN.Network,
		"containerd": cfg.Containerd.Address, "nri_socket": cfg.NRI.Socket, "source": cfg.Plugin.Source,
		"mapping_sources": fmt.Sprint(cfg.Plugin.MappingSources), "failure_policy": cfg.Plugin.FailurePolicy,
		"deadline": cfg.Plugin.Deadline.String()}).Info("nri-hcn-portmap starting")
	srcs := plugin.Sources{
		Mode: cfg.Plugin.Source,
		NRI: plugin.NewNRISource(core, plugin.NRIConfig{Socket: cfg.NRI.Socket, PluginName: cfg.NRI.PluginName,
			PluginIndex: cfg.NRI.PluginIndex, ReconnectMax: cfg.NRI.ReconnectMax.Duration,
			FailClosed: cfg.Plugin.FailurePolicy == config.FailClosed}, log),
		Events:           plugin.NewEventSource(core, store, resync, cfg.NRI.ReconnectMax.Duration, log),
		Resync:           resync,
		NRISocketExists:  func() bool { _, err := os.Stat(cfg.NRI.Socket); return err == nil },
		RegistrationWait: 6 * time.Second,
		EventsWithNRI:    runtime.GOOS == "windows",
		Log:              log,
	}
	err = srcs.Run(ctx)
	log.Info("nri-hcn-portmap stopped")
	return err
}

func statusCmd(args []string, stdout, stderr io.Writer) error {
	var format string
	cfg, err := parse("status", args, stderr, func(fs *flag.FlagSet) {
		fs.StringVar(&format, "o", "table", "output format: table or json")
	})
	if err != nil {
		return err
	}
	mgr, err := newManager(cfg.HCN)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.HCN.CallTimeout.Duration)
	defer cancel()
	eps, err := mgr.Owned(ctx)
	if err != nil {
		return err
	}
	return plugin.WriteStatus(stdout, plugin.StatusEntries(mgr, eps), format)
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
