package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/config"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/test/testfs"
	"github.com/sirupsen/logrus"
)

// The version comes from the build (make build stamps it with -ldflags),
// not from the source.
// The version, commit and date stamped, and the Go version, said by both
// spellings.
func TestVersionIsStamped(t *testing.T) {
	bin := pluginBinary(t, runtime.GOOS, testVersion)
	want := "nri-hcn-portmap " + testVersion + " (commit " + testCommit + ", built " + testDate + ", go1."
	for _, args := range [][]string{{"version"}, {"--version"}} {
		out, err := exec.Command(bin, args...).Output()
		if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		if got := strings.TrimSpace(string(out)); !strings.HasPrefix(got, want) || !strings.HasSuffix(got, ")") {
			t.Errorf("%v = %q, want %s...)", args, got, want)
		}
	}
}

// What the binaries of these tests are stamped with (make test-windows
// stamps the same).
const (
	testVersion = "v9.8.7-test"
	testCommit  = "0123456789abcdef0123456789abcdef01234567"
	testDate    = "2026-12-01T00:00:00Z"
)

// pluginBinary is the plugin built for goos and stamped with version, by
// go build. Where no Go toolchain runs (these tests as a Windows binary
// under wine: there is no go.exe in wine's PATH), it is the one
// NRI_HCN_PORTMAP_EXE names, which make test-windows builds for goos
// windows and stamps with testVersion: the test still runs the binary.
func pluginBinary(t *testing.T, goos, version string) string {
	t.Helper()
	if _, err := exec.LookPath("go"); err != nil {
		exe := os.Getenv("NRI_HCN_PORTMAP_EXE")
		if exe == "" || goos != "windows" || version != testVersion {
			t.Fatalf("no Go toolchain (%v) and no NRI_HCN_PORTMAP_EXE built for windows with version %s (make test-windows sets it)", err, testVersion)
		}
		return exe
	}
	bin := filepath.Join(testfs.TempDir(t), "nri-hcn-portmap")
	if goos == "windows" {
		bin += ".exe"
	}
	build := exec.Command("go", "build", "-ldflags", "-X main.version="+version+" -X main.commit="+testCommit+" -X main.date="+testDate, "-o", bin, ".")
	build.Env = append(os.Environ(), "GOOS="+goos)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build (GOOS=%s): %v\n%s", goos, err, out)
	}
	return bin
}

// The usage lists the simulator only where it is built (not on Windows).
func TestUsageListsTheCommandsOfThisBuild(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := mainArgs([]string{"help"}, &stdout, &stderr); code != 0 {
		t.Fatalf("help exited %d: %s", code, stderr.String())
	}
	for _, cmd := range []string{"status", "health", "reload", "cleanup", "service install", "version"} {
		if !strings.Contains(stdout.String(), "nri-hcn-portmap "+cmd) {
			t.Errorf("usage does not list %q:\n%s", cmd, stdout.String())
		}
	}
	hasSim := strings.Contains(stdout.String(), "nri-hcn-portmap simulator")
	if hasSim != (runtime.GOOS != "windows") {
		t.Errorf("usage lists the simulator: %v on %s", hasSim, runtime.GOOS)
	}
	stdout.Reset()
	stderr.Reset()
	code := mainArgs([]string{"simulator", "-h"}, &stdout, &stderr)
	if runtime.GOOS == "windows" && (code != 1 || !strings.Contains(stderr.String(), "not part of the Windows build")) {
		t.Errorf("simulator on Windows: exit %d, %q", code, stderr.String())
	}
}

// Each message a new user meets, with its exact text.
func TestCommandLineMessages(t *testing.T) {
	free := "127.0.0.1:1" // nothing listens there
	noSocket := filepath.Join(testfs.TempDir(t), "none.sock")
	if runtime.GOOS == "windows" {
		noSocket = `\\.\pipe\nri-hcn-portmap-test-none`
	}
	tests := []struct {
		name       string
		args       []string
		code       int
		stdout     string // exact, or a prefix when it ends in "..."
		stderr     string
		onlyLinux  bool
		notWindows bool
	}{
		{name: "help flag", args: []string{"-h"}, stdout: usage()},
		{name: "help command", args: []string{"help"}, stdout: usage()},
		{name: "service help", args: []string{"service", "-h"}, stdout: serviceUsage},
		{name: "service without a subcommand", args: []string{"service"}, code: 2,
			stderr: serviceUsage + "nri-hcn-portmap: service: want install, uninstall or absent\n"},
		{name: "service typo", args: []string{"service", "instal"}, code: 2,
			stderr: "nri-hcn-portmap: service: unknown subcommand \"instal\" (want install, uninstall or absent)\n"},
		{name: "--version", args: []string{"--version"}, stdout: "nri-hcn-portmap dev (commit ..."},
		{name: "version takes no argument", args: []string{"version", "x"}, code: 2, stderr: "version: unexpected argument \"x\"\nUsage of version:\n"},
		{name: "status takes only its flags", args: []string{"status", "--nri-socket", "/x"}, code: 2,
			stderr: "flag provided but not defined: -nri-socket\nUsage of status:\n..."},
		{name: "doctor takes only its flags", args: []string{"doctor", "--metrics-listen", ":9467"}, code: 2,
			stderr: "flag provided but not defined: -metrics-listen\n..."},
		{name: "an output format that is none", args: []string{"doctor", "--output", "yaml"}, code: 2,
			stderr: "invalid value \"yaml\" for flag -output: want table or json\n..."},
		{name: "an argument no command takes", args: []string{"status", "extra"}, code: 2, stderr: "status: unexpected argument \"extra\"\nUsage of status:\n..."},
		{name: "config default takes no argument", args: []string{"config", "default", "x"}, code: 2,
			stderr: "config default: unexpected argument \"x\"\nUsage of config default:\n..."},
		{name: "service install takes no argument", args: []string{"service", "install", "x"}, code: 2,
			stderr: "service install: unexpected argument \"x\"\nUsage of service install:\n..."},
		{name: "the simulator takes no argument", args: []string{"simulator", "--listen", "unix:///tmp/x.sock", "x"}, code: 2, notWindows: true,
			stderr: "simulator: unexpected argument \"x\"\nUsage of simulator:\n..."},
		{name: "config without a subcommand", args: []string{"config"}, code: 2, stderr: configUsage + "nri-hcn-portmap: config: want default or dump\n"},
		{name: "unknown command", args: []string{"stauts"}, code: 2, stderr: "unknown command \"stauts\"\n\n" + usage()},
		{name: "run on Linux with the defaults says how to use the simulator, once", args: []string{"run", "--admin-listen", ""}, code: 1, onlyLinux: true,
			stderr: "nri-hcn-portmap: hcn backend \"windows\": the windows HCN backend is not available on linux (HNS exists only on Windows); " +
				"to run against the HNS simulator, start it (nri-hcn-portmap simulator --listen unix:///tmp/hcnsim.sock) and pass " +
				"--hcn-backend simulated --hcn-simulator unix:///tmp/hcnsim.sock: hcn backend unavailable\n"},
		{name: "simulator without --listen", args: []string{"simulator"}, code: 2, notWindows: true,
			stderr: "simulator: --listen is required: unix:///path or tcp://127.0.0.1:port\nUsage of simulator:\n..."},
		{name: "health with no plugin running", args: []string{"health", "--admin-listen", free}, code: 1,
			stderr: "nri-hcn-portmap: health: no plugin answers at " + free + ": ..."},
		{name: "reload with no plugin running", args: []string{"reload", "--admin-socket", noSocket}, code: 1,
			stderr: "nri-hcn-portmap: reload: no plugin answers at " + noSocket + ": ..."},
		{name: "reload takes admin.socket, not admin.listen", args: []string{"reload", "--admin-listen", free}, code: 2,
			stderr: "flag provided but not defined: -admin-listen\n..."},
		{name: "service install validates the whole configuration first", args: []string{"service", "install", "--config", badConfig(t)}, code: 1,
			stderr: "nri-hcn-portmap: config: " + badConfig(t) + `:2: plugin.deadline = "5s": must be positive and below 2s (NRI's request timeout)` + "\n"},
		{name: "health takes only its flags", args: []string{"health", "--hcn-backend", "simulated"}, code: 2,
			stderr: "flag provided but not defined: -hcn-backend\n..."},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if (tt.onlyLinux && runtime.GOOS != "linux") || (tt.notWindows && runtime.GOOS == "windows") {
				t.Skip("a message of another OS's build")
			}
			var stdout, stderr bytes.Buffer
			code := mainArgs(tt.args, &stdout, &stderr)
			if code != tt.code {
				t.Errorf("exit %d, want %d (stderr %q)", code, tt.code, stderr.String())
			}
			match(t, "stdout", stdout.String(), tt.stdout)
			match(t, "stderr", stderr.String(), tt.stderr)
		})
	}
}

// badConfig is a configuration file that decodes but does not validate.
func badConfig(t *testing.T) string {
	p := filepath.Join(os.TempDir(), "nri-hcn-portmap-bad-config.toml")
	if err := os.WriteFile(p, []byte("[plugin]\ndeadline = \"5s\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// match compares exactly, or by prefix when want ends in "...".
func match(t *testing.T, what, got, want string) {
	t.Helper()
	if prefix, ok := strings.CutSuffix(want, "..."); ok {
		if !strings.HasPrefix(got, prefix) {
			t.Errorf("%s = %q\nwant it to start with %q", what, got, prefix)
		}
		return
	}
	if got != want {
		t.Errorf("%s = %q\nwant %q", what, got, want)
	}
}

// A service is told Running before anything can block: the plugin is built
// inside, retrying while HNS does not answer (at boot it is
// trigger-started), and other errors end it at once.
func TestBuildRetriesWhileHNSDoesNotAnswer(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("the windows backend is HNS itself here")
	}
	log := logrus.NewEntry(logrus.New())
	log.Logger.SetOutput(io.Discard)
	cfg := config.Default() // the windows backend: ErrUnavailable off Windows, as HNS not answering yet
	cfg.HCN.CallTimeout.Duration = time.Second
	ctx, cancel := context.WithCancel(context.Background())
	attempts := 0
	log.Logger.AddHook(countHook{func() {
		if attempts++; attempts == 2 { // retried once: the service is stopped
			cancel()
		}
	}})
	if _, err := buildRetrying(ctx, cfg, nil, log); !errors.Is(err, hcn.ErrUnavailable) || attempts < 2 {
		t.Fatalf("err = %v after %d attempts, want ErrUnavailable after a retry", err, attempts)
	}
	cfg.HCN.Backend, cfg.HCN.SimulatorAddress = config.BackendSimulated, "tcp://127.0.0.1:1"
	a, err := buildRetrying(context.Background(), cfg, nil, log)
	if err != nil || a == nil {
		t.Fatalf("build against the simulator: %v", err)
	}
	a.core.Close()
}

// countHook calls f on every warning ("HNS does not answer yet; retrying").
type countHook struct{ f func() }

func (countHook) Levels() []logrus.Level { return []logrus.Level{logrus.WarnLevel} }
func (h countHook) Fire(*logrus.Entry) error {
	h.f()
	return nil
}

// The binary must not link client-go's generated clientset or its scheme:
// they register every API group of Kubernetes at start-up, which doubled the
// plugin's idle memory (42 MiB against 20 without them, measured) for the
// three calls package kube makes.
func TestBinaryDoesNotLinkTheClientset(t *testing.T) {
	goos := []string{"linux", "windows"}
	if _, err := exec.LookPath("go"); err != nil {
		goos = []string{"windows"} // the binary make test-windows built (pluginBinary)
	}
	for _, g := range goos {
		// a package linked in leaves its functions' names in the binary's
		// symbol table (pclntab), ELF and PE alike
		b, err := os.ReadFile(pluginBinary(t, g, testVersion))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(b, []byte("k8s.io/client-go/rest.")) {
			t.Fatalf("GOOS=%s: no function of k8s.io/client-go/rest in the binary: the check cannot see packages", g)
		}
		for _, pkg := range []string{"k8s.io/client-go/kubernetes.", "k8s.io/client-go/kubernetes/scheme.", "k8s.io/client-go/kubernetes/typed/"} {
			if bytes.Contains(b, []byte(pkg)) {
				t.Errorf("GOOS=%s: the plugin links %s", g, strings.TrimSuffix(pkg, "."))
			}
		}
	}
}

// The security model a wine test reads the node's DACLs from (build tag
// sddlmodel, plugin/nodefs/security_model_windows.go) is never in the
// release .exe: whoever could set its environment variable would decide
// which files the plugin trusts.
func TestReleaseBuildReadsNoSDDLModel(t *testing.T) {
	const env = "NRI_HCN_PORTMAP_SDDL_MODEL"
	b, err := os.ReadFile(pluginBinary(t, "windows", testVersion))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(b, []byte(env)) {
		t.Fatalf("the release .exe reads %s", env)
	}
	if _, err := exec.LookPath("go"); err != nil {
		return // under wine: the release build alone
	}
	model := filepath.Join(testfs.TempDir(t), "model.exe")
	build := exec.Command("go", "build", "-tags", "sddlmodel", "-o", model, ".")
	build.Env = append(os.Environ(), "GOOS=windows")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build -tags sddlmodel: %v\n%s", err, out)
	}
	if b, err := os.ReadFile(model); err != nil || !bytes.Contains(b, []byte(env)) {
		t.Fatalf("the test build does not name %s (%v): the check cannot see it", env, err)
	}
}

// config is a leaf that names the route modes by itself (and holds the
// default metric, once); hcn gives them their meaning. The two must agree.
func TestConfigRouteModesAreHCNs(t *testing.T) {
	var modes []string
	for _, m := range hcn.RouteModes() {
		modes = append(modes, string(m))
	}
	if !slices.Equal(config.RouteModes(), modes) || config.RouteLowPriority != string(hcn.RouteLowPriority) {
		t.Fatalf("config: %v; hcn: %v", config.RouteModes(), modes)
	}
}

// Issue 24, 7: where the HostProcess bind filter is missing (Windows Server
// 2019, older containerd) the service account's files are only under
// $CONTAINER_SANDBOX_MOUNT_POINT, not at /var/run/secrets/...; client-go's
// in-cluster configuration fails there, and the plugin reads them from the
// mount point, as Calico's and flannel's HostProcess scripts do.
func TestInClusterConfigUnderTheSandboxMountPoint(t *testing.T) {
	root := testfs.TempDir(t)
	dir := filepath.Join(root, "var", "run", "secrets", "kubernetes.io", "serviceaccount")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"token", "ca.crt"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
	t.Setenv("KUBERNETES_SERVICE_PORT", "443")
	t.Setenv("CONTAINER_SANDBOX_MOUNT_POINT", root)
	rc, err := inClusterConfig()
	if err != nil {
		t.Fatalf("inClusterConfig: %v", err)
	}
	if rc.Host != "https://10.96.0.1:443" || rc.BearerTokenFile != filepath.Join(dir, "token") || rc.CAFile != filepath.Join(dir, "ca.crt") {
		t.Fatalf("config: host %q, token %q, ca %q", rc.Host, rc.BearerTokenFile, rc.CAFile)
	}
	t.Setenv("CONTAINER_SANDBOX_MOUNT_POINT", "")
	if _, err := inClusterConfig(); err == nil {
		t.Fatal("no service account anywhere, yet a configuration")
	}
}

// The reporter never stops the plugin from mapping ports: with
// kubernetes.enabled and no way to reach the API server, the plugin starts,
// says why it reports nothing, and maps ports.
func TestBuildWithoutAnAPIServerStillStarts(t *testing.T) {
	log := logrus.NewEntry(logrus.New())
	log.Logger.SetOutput(io.Discard)
	cfg := config.Default()
	cfg.HCN.Backend, cfg.HCN.SimulatorAddress = config.BackendSimulated, "tcp://127.0.0.1:1"
	cfg.Kubernetes.Enabled = true // no NODE_NAME, no service account here
	a, err := build(context.Background(), cfg, nil, log, nil)
	if err != nil || a == nil {
		t.Fatalf("build = %v: a missing API server stopped the plugin", err)
	}
	defer a.core.Close()
	if a.kube != nil {
		t.Fatal("a reporter without an API server")
	}
	rec := httptest.NewRecorder()
	a.metrics.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if !strings.Contains(rec.Body.String(), "\nnri_hcn_portmap_kubernetes_reporter_up 0\n") {
		t.Fatal("metrics do not say that the reporter is down")
	}
}

// config default prints every key with its default, and config dump the
// configuration in effect (the file, the flags over it): each decodes
// strictly back to what it says; a file that does not validate is an
// error naming it, as at start.
func TestConfigDefaultAndDump(t *testing.T) {
	run := func(args ...string) (string, string, int) {
		var stdout, stderr bytes.Buffer
		code := mainArgs(args, &stdout, &stderr)
		return stdout.String(), stderr.String(), code
	}
	decoded := func(t *testing.T, out string) config.Config {
		t.Helper()
		var cfg config.Config
		if err := config.Decode("output", []byte(out), &cfg); err != nil {
			t.Fatalf("the output does not decode: %v\n%s", err, out)
		}
		return cfg
	}
	out, stderr, code := run("config", "default")
	if code != 0 {
		t.Fatalf("config default: exit %d: %s", code, stderr)
	}
	if got := decoded(t, out); !reflect.DeepEqual(got, config.Default()) {
		t.Errorf("config default decodes to\n%+v\nwant\n%+v", got, config.Default())
	}
	file := filepath.Join(testfs.TempDir(t), "config.toml")
	if err := os.WriteFile(file, []byte("[hcn]\nnetwork = \"pods\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, stderr, code = run("config", "dump", "--config", file, "--log-level", "debug")
	if code != 0 {
		t.Fatalf("config dump: exit %d: %s", code, stderr)
	}
	want := config.Default()
	want.HCN.Network, want.Log.Level = "pods", "debug"
	if got := decoded(t, out); !reflect.DeepEqual(got, want) {
		t.Errorf("config dump decodes to\n%+v\nwant\n%+v", got, want)
	}
	_, stderr, code = run("config", "dump", "--config", badConfig(t))
	if code != 1 || !strings.Contains(stderr, badConfig(t)+`:2: plugin.deadline = "5s"`) {
		t.Errorf("config dump of a bad file: exit %d, %q", code, stderr)
	}
}
