package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"sync"
	"syscall"

	"github.com/sirupsen/logrus"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/cmd/nri-hcn-portmap/service"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/config"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/admin"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/backoff"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/containerd"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/kube"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/nodefs"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/nodenet"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/nri"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/sources"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/telemetry"
)

func runCmd(args []string, stderr io.Writer) error {
	isService, err := service.IsService()
	if err != nil {
		return err
	}
	return runAs(args, stderr, isService, func(msg string) { service.ReportError(service.Name, msg) })
}

// runAs is run, as a service or not. Whatever stops a service before it
// reaches the SCM (its configuration refused or unreadable, its log folder
// refused) goes to the Windows event log under the service's source, by
// report, as well as to stderr, which a service has none of: the operator
// reads why in the event log, not a bare 1053.
func runAs(args []string, stderr io.Writer, isService bool, report func(string)) error {
	err := runUntilTheSCM(args, stderr, isService)
	var said reported
	if err != nil && isService && !errors.As(err, &said) {
		report("nri-hcn-portmap cannot start: " + err.Error())
	}
	return err
}

// reported is an error the service's own path has said already (runService
// reports what stops it once it talks to the SCM).
type reported struct{ error }

func (r reported) Unwrap() error { return r.error }

func runUntilTheSCM(args []string, stderr io.Writer, isService bool) error {
	var pprofAddr string
	cfg, flags, err := parse("run", args, stderr, func(fs *flag.FlagSet) {
		fs.StringVar(&pprofAddr, "pprof", "", "serve Go profiles (net/http/pprof) on this address, e.g. 127.0.0.1:6060; off when empty")
	})
	if err != nil {
		return err
	}
	if err := trusted(flags); err != nil {
		return err
	}
	if pprofAddr != "" && !config.IsLoopback(pprofAddr) {
		return fmt.Errorf("flag --pprof = %q: must be a loopback address (127.0.0.1, ::1, localhost): profiles are for the node's operator alone", pprofAddr)
	}
	if _, set := os.LookupEnv("GOGC"); !set { // the environment's wins, as Go's runtime read it
		debug.SetGCPercent(config.GCPercent)
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
	// hcsshim logs through logrus's standard logger: into ours, so that a
	// service's HNS messages reach its log file
	std := logrus.StandardLogger()
	std.SetOutput(logger.Out)
	std.SetFormatter(logger.Formatter)
	std.SetLevel(logger.GetLevel())
	if pprofAddr != "" {
		go servePprof(pprofAddr, log)
	}
	if isService { // its failures from here on are reported by runService
		if err := runService(cfg, flags, log); err != nil {
			return reported{err}
		}
		return nil
	}
	defer logPanic(log)
	ctx, stop := stopOnSignal(context.Background(), log)
	defer stop()
	ctx = stopWithWrapper(ctx, log) // a HostProcess container's cmd /c wrapper
	if nri.Launched() {
		return runLaunched(ctx, flags, logger, stderr)
	}
	app, err := buildForOS(ctx, cfg, flags, log)
	if err != nil {
		if ctx.Err() != nil {
			return stopped(ctx, cfg, log, nil) // stopped while waiting
		}
		if cfg.Log.File != "" { // stderr gets it from main, once
			log.WithError(err).Error("nri-hcn-portmap cannot start")
		}
		return err
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	go func() {
		for range hup {
			_, _ = app.reload()
		}
	}()
	return stopped(ctx, cfg, log, app.run(ctx))
}

// trusted refuses a configuration file, or the folder that holds it, that
// a principal other than the node's administrators may change: whoever
// may write it decides which pods get which host ports (and with a
// reload, at once). flags nil (a plugin NRI launched, its configuration
// handed over by the runtime): nothing to check.
func trusted(flags *config.Flags) error {
	if flags == nil {
		return nil
	}
	if path := flags.ConfigPath(); path != "" {
		if err := nodefs.Check(path); err != nil {
			return fmt.Errorf("config: %w", err)
		}
	}
	return nil
}

// stopOnSignal is a context that ends when the process is asked to stop
// (SIGINT, SIGTERM; Ctrl-C and Ctrl-Break on Windows), saying so in the
// log and as the context's cause.
func stopOnSignal(parent context.Context, log *logrus.Entry) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(parent)
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		select {
		case sig := <-sigs:
			log.WithField("signal", sig.String()).Info("asked to stop")
			cancel(fmt.Errorf("signal %s", sig))
		case <-ctx.Done():
		}
	}()
	return ctx, func() { signal.Stop(sigs); cancel(nil) }
}

// stopped says how the plugin ends, every way it can: asked to stop (ctx's
// cause: a signal, the HostProcess wrapper), or an error. An error goes to
// stderr once: main prints it, and the log file has it too.
func stopped(ctx context.Context, cfg config.Config, log *logrus.Entry, err error) error {
	if cause := context.Cause(ctx); cause != nil {
		log = log.WithField("reason", cause.Error())
	}
	switch {
	case err == nil:
		log.Info("nri-hcn-portmap stopped")
	case cfg.Log.File != "": // stderr gets it from main, once
		log.WithError(err).Error("nri-hcn-portmap stopped")
	}
	return err
}

// logPanic logs a panic of the main goroutine (with its stack) before it
// goes on to end the process as panics do. A panic elsewhere is printed by
// Go's runtime to stderr (and, for the service, the crash file).
func logPanic(log *logrus.Entry) {
	if r := recover(); r != nil {
		log.WithField("panic", fmt.Sprint(r)).WithField("stack", string(debug.Stack())).Error("nri-hcn-portmap crashed")
		panic(r)
	}
}

// app is the wired plugin.
type app struct {
	cfg     config.Config
	flags   *config.Flags
	resolve func() (config.Config, error) // what reload reads: flags.Resolve, or the NRI configuration
	log     *logrus.Entry
	core    *plugin.Core
	store   *containerd.Store
	srcs    *sources.Sources
	admin   *admin.Admin
	metrics *telemetry.Metrics
	kube    *kube.Reporter        // nil unless kubernetes.enabled
	nss     *kube.Namespaces      // nil unless kubernetes.enabled
	nps     *kube.NetworkPolicies // nil unless kubernetes.enabled and admission.network_policy is not off
	reloads sync.Mutex            // one reload at a time (SIGHUP, /reload, SCM)
}

// build wires the plugin: HCN (bounded, instrumented), containerd, the core
// with its request limits and admission policy, the event sources, the
// admin endpoints. launched is the NRI source of a plugin the runtime
// launched (its only event source), nil otherwise.
func build(ctx context.Context, cfg config.Config, flags *config.Flags, log *logrus.Entry, launched *nri.Source) (*app, error) {
	a := &app{cfg: cfg, flags: flags, log: log, metrics: telemetry.New(version, thisBuild().Commit)}
	a.resolve = func() (config.Config, error) { // a reload reads the file only if it is still the administrators' alone
		if err := trusted(flags); err != nil {
			return config.Config{}, err
		}
		return flags.Resolve()
	}
	mgr, err := newManager(ctx, cfg.HCN, a.metrics.HCNCall, log)
	if err != nil {
		return nil, err
	}
	opt, err := plugin.OptionsFrom(cfg)
	if err != nil {
		return nil, err // Resolve validated it already
	}
	a.store = containerd.NewStore(cfg.Containerd.Address, cfg.Containerd.Namespace)
	var reporter plugin.Reporter
	if cfg.Kubernetes.Enabled {
		// the reporter never stops the plugin from mapping ports
		api, err := newKubeAPI(cfg.Kubernetes)
		if err == nil {
			a.nss = kube.NewNamespaces(api, cfg.Kubernetes.LabelsMaxAge.Duration, a.metrics, log.WithField("component", "namespaces"))
			a.metrics.WatchNamespaces(func() bool { return a.nss.Stale() != "" })
			if mode := cfg.Admission.NetworkPolicy; mode != config.NetworkPolicyOff {
				a.nps = kube.NewNetworkPolicies(api, mode == config.NetworkPolicyKubernetes, cfg.Kubernetes.LabelsMaxAge.Duration, a.metrics,
					log.WithField("component", "network-policies"))
				a.metrics.WatchNetworkPolicies(func() bool { return a.nps.Stale() != "" })
			}
			a.kube, err = newKubeReporter(cfg.Kubernetes, api, a.metrics, log)
		}
		if err != nil {
			log.WithError(err).Error("kubernetes.enabled, but the API server cannot be reached: pods' owners are not told " +
				"(no events, no condition); ports are mapped all the same")
			a.metrics.KubeReporter(false)
		} else {
			reporter = a.kube
			a.metrics.KubeReporter(true)
		}
	}
	sayPodSecurity(cfg, a.nss != nil, log)
	sayNetworkPolicy(cfg, a.nps != nil, log)
	opt.Observer, opt.Reporter = a.metrics, reporter
	a.core = plugin.NewCore(mgr, a.store, opt, log)
	if a.nss != nil {
		a.nss.OnPublish(a.core.SetLabels)       // each sync decides with the labels as last published
		a.nss.OnChange(a.core.NamespaceChanged) // a level known or changed syncs the pods held back for it
	}
	if a.nps != nil {
		a.nps.OnPublish(a.core.SetNetworkPolicies)    // each sync decides with the policies as last published
		a.nps.OnChange(a.core.NetworkPoliciesChanged) // a policy changed syncs the pods it may decide
	}
	a.metrics.CountEndpoints(a.core.Endpoints)
	a.metrics.CountFailing(plugin.FailureReasons(), a.core.Failing)
	a.metrics.CountForeignDNS(a.core.ForeignDNS)
	resync := plugin.NewResyncer(a.core, cfg.Plugin.ResyncInterval.Duration, log)
	mode, nriSrc := cfg.Plugin.Source, launched
	if nriSrc != nil {
		mode = config.SourceNRI
		nriSrc.SetCore(a.core)
		nriSrc.SetRegistered(a.metrics.NRIRegistered)
	} else {
		nriSrc = nri.NewSource(a.core, nri.Config{Socket: cfg.NRI.Socket, PluginName: cfg.NRI.PluginName,
			PluginIndex: cfg.NRI.PluginIndex, ReconnectMax: cfg.NRI.ReconnectMax.Duration, Registered: a.metrics.NRIRegistered}, log)
	}
	a.srcs = sources.New(mode, nriSrc, containerd.NewEventSource(a.core, a.store, resync, cfg.NRI.ReconnectMax.Duration, log),
		resync, cfg.NRI.Socket, log)
	a.srcs.Chosen = a.metrics.SourceChosen
	a.metrics.WatchSource(func() bool { return a.srcs.Health(context.Background()) == nil })
	a.admin = &admin.Admin{
		Checks: []admin.HealthCheck{
			{Name: "event source", Check: a.srcs.Health},
			{Name: "containerd", Check: a.store.Ping},
			{Name: "hcn", Check: mgr.Health},
		},
		Live:     []admin.HealthCheck{{Name: "event sources", Check: a.srcs.Running}},
		Metrics:  a.metrics.Handler(),
		Mappings: func() any { return a.core.Mappings() },
		Reload:   a.reload,
		Log:      log,
	}
	if a.nss != nil { // labels too old to grant: new annotations wait
		a.admin.Checks = append(a.admin.Checks, admin.HealthCheck{Name: "kubernetes namespaces", Check: a.nss.Health})
	}
	if a.nps != nil { // policies too old to grant: no host port is mapped
		a.admin.Checks = append(a.admin.Checks, admin.HealthCheck{Name: "kubernetes network policies", Check: a.nps.Health})
	}
	return a, nil
}

// run runs the plugin until ctx ends; in-flight HCN work then finishes or
// rolls back before it returns.
func (a *app) run(ctx context.Context) error {
	defer a.store.Close()
	defer a.core.Close()
	serve, err := a.listen()
	if err != nil {
		return err
	}
	// served at once, before the event sources start: whoever sees the
	// plugin registered (or subscribed) finds its endpoints answering
	serve(ctx)
	{
		lctx, cancel := context.WithTimeout(ctx, a.cfg.HCN.CallTimeout.Duration)
		err := a.core.LoadPorts(lctx)
		cancel()
		switch {
		case errors.Is(err, hcn.ErrInvalid):
			// hcn.network names a network the plugin may not use (its type,
			// IPv6 on NAT): no pod could be mapped, and a restart will not
			// change that. Stop here, saying so, rather than run not ready.
			return fmt.Errorf("hcn.network = %q cannot be used: %w", a.cfg.HCN.Network, err)
		case err != nil:
			a.log.WithError(err).Warn("could not read our endpoints from HCN at start; the first resync will")
		}
	}
	if a.kube != nil { // never waited for: the API server is off the path
		go a.kube.Run(ctx)
	}
	if a.nss != nil { // until it has listed, annotations wait (never granted)
		go a.nss.Run(ctx)
	}
	if a.nps != nil { // until it has listed, host ports wait (never granted)
		go a.nps.Run(ctx)
	}
	a.log.WithFields(logrus.Fields{"version": version, "backend": a.cfg.HCN.Backend, "network": a.cfg.HCN.Network,
		"containerd": a.cfg.Containerd.Address, "nri_socket": a.cfg.NRI.Socket, "source": a.cfg.Plugin.Source,
		"mapping_sources": fmt.Sprint(a.cfg.Plugin.MappingSources), "failure_policy": a.cfg.Plugin.FailurePolicy,
		"deadline": a.cfg.Plugin.Deadline.String(), "admin": a.cfg.Admin.Listen, "metrics": a.cfg.Admin.MetricsListen,
		"node_network_service": a.cfg.HyperV.NodeNetworkService}).Info("nri-hcn-portmap starting")
	err = a.srcs.Run(ctx)
	a.log.Info("nri-hcn-portmap stopping: finishing in-flight work")
	return err
}

// listen binds the admin addresses, then writes the key the answers on
// admin.listen prove themselves with, and returns what serves them. The
// admin and metrics addresses are the plugin's, or it does not run: a
// program that binds one first (at boot, or while the plugin restarts)
// would otherwise answer the probes and the commands for it, so the start
// fails naming the address and, where the OS says, what holds it (the
// service's recovery, or kubelet, starts it again). admin.socket (reload's
// channel) is not needed to map ports: one that cannot be served is logged.
func (a *app) listen() (func(context.Context), error) {
	type bound struct {
		l     net.Listener
		serve func(context.Context, net.Listener) error
		what  string
	}
	var all []bound
	for _, srv := range []struct {
		key, addr string
		listen    func(string) (net.Listener, error)
		serve     func(context.Context, net.Listener) error
		what      string
	}{{"admin.listen", a.cfg.Admin.Listen, admin.Listen, a.admin.Serve, "admin endpoints unavailable"},
		{"admin.socket", a.cfg.Admin.Socket, admin.ListenPrivate, a.admin.ServePrivate, "admin.socket unavailable: reload only by SIGHUP or the service's paramchange"},
		{"admin.metrics_listen", a.cfg.Admin.MetricsListen, admin.Listen, a.admin.ServeMetrics, "metrics endpoint unavailable"},
		{"hyperv.node_network_service", a.cfg.HyperV.NodeNetworkService, func(addr string) (net.Listener, error) { return admin.ListenAdmins(addr, a.log) },
			a.serveNodeNetwork, "NodeNetworkService unavailable: Hyper-V pods cannot start"}} {
		if srv.addr == "" {
			continue
		}
		l, err := srv.listen(srv.addr)
		switch {
		case err != nil && srv.key == "admin.socket":
			a.log.WithError(err).Error(srv.what)
			continue
		case err != nil:
			for _, b := range all {
				b.l.Close()
			}
			if errors.Is(err, admin.ErrPortForbidden) {
				return nil, fmt.Errorf("%s = %q cannot be served: %w; move the plugin to a port outside them with %s", srv.key, srv.addr, err, srv.key)
			}
			return nil, fmt.Errorf("%s = %q cannot be served: %w; the plugin does not run where another program answers for it: "+
				"free the port, or move the plugin with %s", srv.key, srv.addr, err, srv.key)
		}
		all = append(all, bound{l, srv.serve, srv.what})
	}
	// the key once the addresses are this plugin's: a run that cannot
	// bind them (a second one, while the service runs) leaves the running
	// plugin's key, and so its answers' proof, as they are
	if a.cfg.Admin.Listen != "" {
		key, err := admin.NewKey(a.cfg.Admin.KeyFile)
		if err != nil {
			for _, b := range all {
				b.l.Close()
			}
			return nil, err
		}
		a.admin.Key = key
	}
	return func(ctx context.Context) {
		for _, b := range all {
			go func() {
				if err := b.serve(ctx, b.l); err != nil {
					a.log.WithError(err).Error(b.what)
				}
			}()
		}
	}, nil
}

// serveNodeNetwork serves ncproxy's NodeNetworkService on l, adding the
// pods' adapters through ncproxy at hyperv.ncproxy.
func (a *app) serveNodeNetwork(ctx context.Context, l net.Listener) error {
	ncp, closeNCP, err := nodenet.Dial(a.cfg.HyperV.NCProxy)
	if err != nil {
		return err
	}
	defer closeNCP()
	return nodenet.Serve(ctx, l, nodenet.New(a.core, ncp, a.log))
}

// sayPodSecurity says at start how the annotation meets Pod Security:
// checked against the namespaces' levels, off (another policy engine's
// job), or refused on every pod because no namespace can be read.
func sayPodSecurity(cfg config.Config, readable bool, log *logrus.Entry) {
	a := cfg.Admission
	switch {
	case !cfg.Plugin.UsesMappings(config.MappingsAnnotations):
	case a.PodSecurity == config.PodSecurityOff:
		log.WithField("admission.pod_security", a.PodSecurity).Warn("Pod Security is not checked for the port-mappings annotation: " +
			"any pod the other admission rules allow gets its host ports, whatever its namespace's level")
	case !readable:
		log.WithField("admission.pod_security", a.PodSecurity).Warn("the namespaces' Pod Security levels cannot be read " +
			"(kubernetes.enabled = false, or no API server configuration): every pod's port-mappings annotation is refused; " +
			"enable [kubernetes], or set admission.pod_security = \"off\" where another policy engine guards the annotation")
	case a.PodSecurityDefaultLevel == config.LevelPrivileged:
		log.WithFields(logrus.Fields{"admission.pod_security": a.PodSecurity, "default_level": a.PodSecurityDefaultLevel,
			"exempt": fmt.Sprint(a.PodSecurityExemptNamespaces)}).Warn("the port-mappings annotation obeys the namespaces' Pod Security levels; " +
			"an unlabelled namespace counts as privileged (admission.pod_security_default_level), as the operator says the cluster's default is")
	default:
		log.WithFields(logrus.Fields{"admission.pod_security": a.PodSecurity, "default_level": a.PodSecurityDefaultLevel,
			"exempt": fmt.Sprint(a.PodSecurityExemptNamespaces)}).Info("the port-mappings annotation obeys the namespaces' Pod Security levels: " +
			"host ports by annotation only in namespaces labelled privileged (an unlabelled one counts as " + a.PodSecurityDefaultLevel + ")")
	}
}

// sayNetworkPolicy says at start how host ports meet the cluster's
// NetworkPolicy: checked, off (the operator's word that nothing on this
// node needs filtering), or every host port refused because no policy can
// be read.
func sayNetworkPolicy(cfg config.Config, readable bool, log *logrus.Entry) {
	mode := cfg.Admission.NetworkPolicy
	fields := logrus.Fields{"admission.network_policy": mode}
	switch {
	case mode == config.NetworkPolicyOff:
		log.WithFields(fields).Warn(config.NetworkPolicyOffSays)
	case !readable:
		log.WithFields(fields).Warn("the cluster's NetworkPolicies cannot be read (kubernetes.enabled = false, or no API server configuration): " +
			"no host port is mapped; enable [kubernetes], or set admission.network_policy = \"off\" where no NetworkPolicy needs to filter host ports")
	default:
		log.WithFields(fields).Info("host ports obey the cluster's NetworkPolicies: a port is mapped only where the policies selecting the pod " +
			"admit every source to it (no NetworkPolicy engine filters the plugin's endpoint)")
	}
}

// reload re-reads the configuration file (and flags): the admission policy
// applies to new pods at once; other changes need a restart, and are named.
// An invalid file is rejected and the running configuration stays.
func (a *app) reload() (string, error) {
	a.reloads.Lock()
	defer a.reloads.Unlock()
	next, err := a.resolve()
	if err != nil {
		a.metrics.Reloaded(false)
		a.log.WithError(err).Error("configuration reload rejected; the running configuration stays in force")
		return "", err
	}
	policy, err := plugin.NodePolicy(next.Admission, a.cfg)
	if err != nil {
		a.metrics.Reloaded(false)
		return "", err
	}
	a.core.SetAdmission(policy)
	msg := "admission policy applied to every mapping not in place (mappings in place stay)"
	if pending := a.cfg.RestartNeeded(next); len(pending) > 0 {
		msg += "; changes to " + strings.Join(pending, ", ") + " take effect after a restart"
	}
	a.cfg.Admission = next.Admission
	a.metrics.Reloaded(true)
	a.log.WithField("result", msg).Info("configuration reloaded")
	return msg, nil
}

// runService runs the plugin under the service control manager. The SCM
// hears Running at once: everything that can block (HNS answering at boot,
// containerd) happens inside, HNS retried with backoff until the service is
// stopped. A start-up failure goes to the log file and the Windows event
// log; a crash's output to a file next to the log.
func runService(cfg config.Config, flags *config.Flags, log *logrus.Entry) error {
	log.Info("running as a Windows service")
	if f, err := os.OpenFile(cfg.Log.File+".crash", os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); err == nil {
		if err := debug.SetCrashOutput(f, debug.CrashOptions{}); err != nil {
			log.WithError(err).Warn("crash output not redirected")
		}
		f.Close() // SetCrashOutput keeps its own handle
	}
	var (
		mu      sync.Mutex
		running *app
	)
	run := func(ctx context.Context) error {
		a, err := buildRetrying(ctx, cfg, flags, log)
		if err != nil {
			if ctx.Err() == nil {
				log.WithError(err).Error("nri-hcn-portmap cannot start")
				service.ReportError(service.Name, "nri-hcn-portmap cannot start: "+err.Error())
			}
			return err
		}
		mu.Lock()
		running = a
		mu.Unlock()
		return a.run(ctx)
	}
	reload := func() {
		mu.Lock()
		a := running
		mu.Unlock()
		if a != nil {
			_, _ = a.reload()
		}
	}
	return service.Run(service.Name, run, reload)
}

// buildRetrying builds the plugin, retrying while HNS does not answer yet
// (it is trigger-started at boot), until ctx ends: as a service and as a
// HostProcess pod alike. Other errors are final.
func buildRetrying(ctx context.Context, cfg config.Config, flags *config.Flags, log *logrus.Entry) (*app, error) {
	retry := backoff.New(config.StartRetryMin, config.StartRetryMax)
	for {
		bctx, cancel := context.WithTimeout(ctx, cfg.HCN.CallTimeout.Duration)
		a, err := build(bctx, cfg, flags, log, nil)
		cancel()
		if err == nil || !plugin.Passes(err) { // HNS not answering yet passes; the rest is final
			return a, err
		}
		log.WithError(err).WithField("retry_in", retry.Next().String()).Warn("HNS does not answer yet; retrying")
		if !retry.Wait(ctx) {
			return nil, err
		}
	}
}

// runLaunched runs a plugin the runtime launched (NRI's environment names
// its socket, name and index): it registers under the runtime's name and
// index, and builds everything from the configuration NRI hands over in
// Configure (the runtime's <index>-<name>.conf; it replaces --config, flags
// still win; a bad one fails Configure, so the runtime logs why). When the
// runtime closes the connection the plugin exits non-zero: the runtime
// launches it again when it starts again.
func runLaunched(ctx context.Context, flags *config.Flags, logger *logrus.Logger, stderr io.Writer) error {
	id := nri.Identity()
	log := logrus.NewEntry(logger).WithField("nri_plugin", id)
	name := "NRI configuration of " + id + " (" + id + ".conf in the runtime's plugin_config_path)"
	appCtx, cancelApp := context.WithCancel(ctx)
	defer cancelApp()
	var (
		mu       sync.Mutex
		running  *app
		done     = make(chan error, 1)
		closeLog io.Closer
		src      *nri.Source
	)
	defer func() {
		if closeLog != nil {
			closeLog.Close()
		}
	}()
	configure := func(cctx context.Context, text string) error {
		mu.Lock()
		defer mu.Unlock()
		if running != nil {
			return errors.New("nri-hcn-portmap: configured twice on one connection")
		}
		cfg, err := flags.ResolveData(name, []byte(text))
		if err != nil {
			return err
		}
		if cfg.Plugin.Source == config.SourceContainerd {
			return fmt.Errorf("%s: plugin.source = %q: a plugin the runtime launches takes its pod events from NRI (use nri or auto)", name, cfg.Plugin.Source)
		}
		if strings.TrimSpace(text) != "" && flags.ConfigPath() != "" {
			log.WithField("config", flags.ConfigPath()).Warn("the NRI configuration replaces --config")
		}
		nl, c, err := newLogger(cfg.Log, stderr) // its [log] section, from now on
		if err != nil {
			return err
		}
		logger.SetOutput(nl.Out)
		logger.SetFormatter(nl.Formatter)
		logger.SetLevel(nl.GetLevel())
		closeLog = c
		a, err := build(cctx, cfg, flags, log, src)
		if err != nil {
			return err
		}
		a.resolve = func() (config.Config, error) { return flags.ResolveData(name, []byte(text)) }
		running = a
		go func() { done <- a.run(appCtx) }()
		return nil
	}
	defaults, _ := flags.Resolve() // only its NRI timing; Configure resolves for real
	src = nri.NewSource(nil, nri.Config{Launched: true, Configure: configure, ReconnectMax: defaults.NRI.ReconnectMax.Duration}, log)
	log.Info("launched by the NRI runtime: waiting for its configuration")
	err := src.Run(ctx)
	cancelApp()
	mu.Lock()
	started := running != nil
	mu.Unlock()
	if started {
		if aerr := <-done; err == nil {
			err = aerr
		}
	}
	return err
}
