package main

import (
	"bytes"
	"fmt"
	"io"
	"maps"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/config"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/telemetry"
)

// The documentation an operator reads: the README, the pages it links and
// the chart's README.
func docFiles(t *testing.T) []string {
	t.Helper()
	files := []string{"../../README.md", "../../deploy/helm/nri-hcn-portmap/README.md"}
	pages, err := filepath.Glob("../../docs/*.md")
	if err != nil || len(pages) == 0 {
		t.Fatalf("docs/*.md: %v %v", pages, err)
	}
	return append(files, pages...)
}

// code is the text of a document an operator would type or look up: the
// inline code spans and the lines of fenced blocks (with their language).
type code struct {
	text, lang string
	block      bool
}

var (
	fenceRe = regexp.MustCompile("(?ms)^\\s*```([a-z]*)\\n(.*?)^\\s*```")
	spanRe  = regexp.MustCompile("`([^`\\n]+)`")
	linkRe  = regexp.MustCompile(`\]\(([^)#\s]+)(#[^)]*)?\)`)
)

func codeOf(doc string) []code {
	var out []code
	for _, m := range fenceRe.FindAllStringSubmatch(doc, -1) {
		out = append(out, code{text: m[2], lang: m[1], block: true})
	}
	prose := fenceRe.ReplaceAllString(doc, "")
	for _, m := range spanRe.FindAllStringSubmatch(prose, -1) {
		out = append(out, code{text: m[1]})
	}
	return out
}

// commandFlags runs each command's -h and reads the flags it prints: the
// commands as they are, not as a list kept beside them.
func commandFlags(t *testing.T) map[string]map[string]bool {
	t.Helper()
	out := map[string]map[string]bool{}
	flagLine := regexp.MustCompile(`(?m)^  --?([a-z][a-z0-9-]*)(?:, --([a-z][a-z0-9-]*))?`)
	for _, cmd := range []string{"run", "status", "health", "reload", "cleanup", "doctor", "service install", "simulator", "config dump", "config default"} {
		if !builtHere(cmd) {
			out[cmd] = nil // not in this build: its flags are checked where it is (the Linux run of this test)
			continue
		}
		var stdout, stderr bytes.Buffer
		args := append(strings.Fields(cmd), "-h")
		if code := mainArgs(args, &stdout, &stderr); code != 0 {
			t.Fatalf("%s -h: exit %d\n%s", cmd, code, stderr.String())
		}
		flags := map[string]bool{"h": true, "help": true}
		for _, m := range flagLine.FindAllStringSubmatch(stderr.String(), -1) {
			flags[m[1]] = true
			if m[2] != "" {
				flags[m[2]] = true
			}
		}
		if len(flags) < 3 && cmd != "simulator" && cmd != "config default" {
			t.Fatalf("%s -h printed no flags:\n%s", cmd, stderr.String())
		}
		out[cmd] = flags
	}
	out["service uninstall"] = map[string]bool{}
	out["service absent"] = map[string]bool{}
	out["service"] = map[string]bool{"h": true}
	out["config"] = map[string]bool{"h": true}
	out["version"] = map[string]bool{"h": true}
	top := maps.Clone(out["run"]) // nri-hcn-portmap [flags] runs the plugin
	top["version"] = true         // and nri-hcn-portmap --version says what it is
	out[""] = top
	return out
}

// configKeys are the configuration file's keys, section.key, from the
// struct's toml tags.
func configKeys() map[string]bool {
	keys := map[string]bool{}
	ct := reflect.TypeOf(config.Config{})
	for i := range ct.NumField() {
		sec := ct.Field(i)
		name := strings.Split(sec.Tag.Get("toml"), ",")[0]
		keys[name+".*"] = true
		st := sec.Type
		for j := range st.NumField() {
			if k := strings.Split(st.Field(j).Tag.Get("toml"), ",")[0]; k != "" && k != "-" {
				keys[name+"."+k] = true
			}
		}
	}
	return keys
}

// chartValues are the chart's value paths (a.b.c), from values.yaml.
func chartValues(t *testing.T) map[string]bool {
	t.Helper()
	b, err := os.ReadFile("../../deploy/helm/nri-hcn-portmap/values.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := yaml.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	var walk func(prefix string, m map[string]any)
	walk = func(prefix string, m map[string]any) {
		for k, x := range m {
			p := prefix + k
			out[p] = true
			out[p+".*"] = true
			if sub, ok := x.(map[string]any); ok {
				walk(p+".", sub)
			}
		}
	}
	walk("", v)
	return out
}

// makeTargets are the Makefile's targets.
func makeTargets(t *testing.T) map[string]bool {
	t.Helper()
	b, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^([a-z][a-z0-9-]*):`).FindAllStringSubmatch(string(b), -1) {
		out[m[1]] = true
	}
	return out
}

// metricNames are the metric families the plugin exports.
func metricNames(t *testing.T) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^# TYPE (nri_hcn_portmap_\w+)`).FindAllStringSubmatch(exposition(t), -1) {
		out[m[1]] = true
	}
	if len(out) < 10 {
		t.Fatalf("metrics: %v", out)
	}
	return out
}

// exposition is what /metrics serves with every family of the plugin's
// holding a sample.
func exposition(t *testing.T) string {
	t.Helper()
	m := telemetry.New("test", "0123abc")
	m.CountEndpoints(func() int { return 0 })
	m.CountFailing(nil, func() map[string]int { return map[string]int{"HostPortDenied": 1} })
	m.CountForeignDNS(func() int { return 0 })
	m.KubeReporter(true)
	// every labelled family appears once it has a sample
	m.Operation("start", "ok")
	m.HCNCall("create", 0, io.EOF)
	m.Reconciled("periodic", 1, 1, 1, 1)
	m.Reconnected("nri")
	m.SourceChosen("containerd")
	m.NRIRegistered("50-hcn-portmap", "external", true)
	m.KubeReport("event", "sent")
	m.Skipped("mapped-by-cni")
	m.Reloaded(true)
	m.Mapped("nri", time.Millisecond)
	m.WatchSource(func() bool { return true })
	m.NamespacesSynced(true)
	m.WatchNamespaces(func() bool { return false })
	m.NetworkPoliciesSynced(true)
	m.WatchNetworkPolicies(func() bool { return false })
	q := m.QueueMetrics()
	q.NewDepthMetric("q")
	q.NewAddsMetric("q")
	q.NewLatencyMetric("q")
	q.NewWorkDurationMetric("q")
	q.NewUnfinishedWorkSecondsMetric("q")
	q.NewLongestRunningProcessorSecondsMetric("q")
	q.NewRetriesMetric("q")
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	return rec.Body.String()
}

// flags that belong to other programs in the docs' commands (helm,
// kubectl, docker, go, sc.exe, PowerShell).
var foreignFlags = map[string]bool{
	"set": true, "reuse-values": true, "create-namespace": true, "kube-version": true, "namespace": true,
	"platform": true, "build-arg": true, "push": true, "for": true, "timeout": true, "kubeconfig": true,
	"race": true, "count": true, "run": true, "bench": true, "benchtime": true, "tags": true, "fuzz": true,
	"fuzztime": true, "cpu": true, "v": true, "n": true, "f": true, "t": true, "k": true, "l": true,
	"o": true, "IncludeAllCompartments": true, "DisplayName": true, "Direction": true, "Protocol": true,
	"LocalPort": true, "Action": true, "ItemType": true, "Force": true, "depends-on": true,
	"dry-run": true, "show-only": true, "strict": true, "api-versions": true, "prune": true, "selector": true, "duration": true, "prune-allowlist": true, "mod": true, "diff": true, "trimpath": true, "ldflags": true,
}

var (
	// the program in command position: at the start, after && or ;, after
	// kubectl exec's --, or as the path PowerShell's & calls
	invocationRe = regexp.MustCompile(`(?:^\s*|&&\s*|;\s*|\s--\s+|&\s+'[^']*\\)nri-hcn-portmap(?:\.exe)?'?((?:[ \t]+[^\s|;&)#` + "`" + `]+)*)`)
	keyRe        = regexp.MustCompile(`^(plugin|admission|nri|containerd|hcn|kubernetes|admin|log)\.([a-z_*]+)\b`)
	valueRe      = regexp.MustCompile(`^(image|config|metrics|daemonset|cleanup|podAnnotations|podLabels|nameOverride|fullnameOverride)(\.[A-Za-z.*]+)?`)
	setRe        = regexp.MustCompile(`--set[ =]([A-Za-z.]+)=`)
	makeRe       = regexp.MustCompile(`(?:^\s*|&&\s*|;\s*)make ([a-z][a-z0-9-]*)`)
	metricRe     = regexp.MustCompile(`nri_hcn_portmap_[a-z_]+`)
	pathRe       = regexp.MustCompile(`^(?:\.\./)*((?:cmd|plugin|hcn|config|test|deploy|docs|hack|\.ci|\.github)/[A-Za-z0-9_./-]*|README\.md|Makefile|go\.mod|DESIGN\.md)$`)
)

// TestDocsAreTrue (issue 25): every command, flag, configuration key, chart
// value, make target, metric and repository path that README.md, docs/ and
// the chart's README name exists, and every TOML example of the plugin's
// configuration decodes, so the documentation cannot drift from the
// product.
func TestDocsAreTrue(t *testing.T) {
	flags := commandFlags(t)
	allFlags := map[string]bool{}
	for _, fs := range flags {
		for f := range fs {
			allFlags[f] = true
		}
	}
	keys, values, targets, metrics := configKeys(), chartValues(t), makeTargets(t), metricNames(t)
	var problems []string
	bad := func(file, format string, args ...any) {
		problems = append(problems, filepath.Base(file)+": "+strings.TrimSpace(fmt.Sprintf(format, args...)))
	}
	for _, file := range docFiles(t) {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		doc := string(b)
		for _, m := range linkRe.FindAllStringSubmatch(doc, -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			if _, err := os.Stat(filepath.Join(filepath.Dir(file), target)); err != nil {
				bad(file, "link %q: no such file", target)
			}
		}
		for _, c := range codeOf(doc) {
			lines := []string{c.text}
			if c.block {
				lines = strings.Split(c.text, "\n")
			}
			if c.block && c.lang == "toml" && !strings.Contains(c.text, "io.containerd") {
				cfg := config.Default()
				if err := config.Decode(file+" (a TOML example)", []byte(c.text), &cfg); err != nil {
					bad(file, "a configuration example does not decode: %v", err)
				}
			}
			for _, line := range lines {
				if i := strings.Index(line, " #"); i >= 0 && c.block {
					line = line[:i] // a comment after the command
				}
				checkInvocations(file, line, flags, bad)
				if strings.Contains(line, "--depends-on containerd") {
					bad(file, "%q: a dependency on containerd makes stopping or restarting it fail with error 1051 (the plugin waits for containerd itself)", line)
				}
				for _, m := range makeRe.FindAllStringSubmatch(line, -1) {
					if !targets[m[1]] {
						bad(file, "make %s: no such target", m[1])
					}
				}
				for _, m := range setRe.FindAllStringSubmatch(line, -1) {
					if !values[m[1]] {
						bad(file, "--set %s: not a chart value", m[1])
					}
				}
				for _, name := range metricRe.FindAllString(line, -1) {
					if !metrics[name] {
						bad(file, "metric %s: the plugin exports no such metric", name)
					}
				}
			}
			if c.block {
				continue
			}
			span := strings.TrimSpace(c.text)
			word := strings.Fields(span + " ")[0]
			switch {
			case strings.HasPrefix(span, "--"):
				name := strings.TrimPrefix(strings.SplitN(strings.Fields(span)[0], "=", 2)[0], "--")
				if !allFlags[name] && !foreignFlags[name] && !strings.Contains(name, "*") {
					bad(file, "flag --%s: no command has it", name)
				}
			case keyRe.MatchString(word) && !strings.Contains(word, "/"):
				m := keyRe.FindStringSubmatch(word)
				k := m[1] + "." + strings.TrimSuffix(m[2], ".")
				if !keys[k] && !(m[1] == "kubernetes" && values[word]) {
					bad(file, "config key %s: no such key", k)
				}
			case valueRe.MatchString(word) && strings.Contains(word, ".") && !strings.Contains(word, "/") && filepath.Ext(word) != ".yaml" && filepath.Ext(word) != ".toml":
				v := strings.TrimSuffix(strings.SplitN(word, "=", 2)[0], ".")
				v = strings.TrimSuffix(v, ",")
				key, settings := strings.CutPrefix(v, "config.settings.") // a configuration key, by section
				switch {
				case settings && (keys[key] || strings.Contains(key, "<")):
				case !values[v] && !values[strings.TrimSuffix(v, ".*")]:
					bad(file, "chart value %s: not in values.yaml", v)
				}
			}
			if m := pathRe.FindStringSubmatch(word); m != nil && !strings.ContainsAny(word, "<*{") {
				p := strings.TrimSuffix(m[1], "/")
				if _, err := os.Stat(filepath.Join("../..", p)); err != nil {
					bad(file, "path %s: not in the repository", p)
				}
			}
		}
	}
	// the usage texts say what the commands take, too
	for _, line := range strings.Split(usage()+serviceUsage, "\n") {
		checkInvocations("usage", line, flags, bad)
	}
	sort.Strings(problems)
	problems = slices.Compact(problems)
	for _, p := range problems {
		t.Error(p)
	}
}

// checkInvocations checks each `nri-hcn-portmap COMMAND --flag` on line.
func checkInvocations(file, line string, flags map[string]map[string]bool, bad func(string, string, ...any)) {
	for _, m := range invocationRe.FindAllStringSubmatch(line, -1) {
		args := strings.Fields(m[1])
		cmd := ""
		if len(args) > 0 && !strings.HasPrefix(args[0], "-") && !strings.HasPrefix(args[0], "[") {
			cmd, args = args[0], args[1:]
			if _, ok := flags[cmd]; !ok {
				if cmd == "service" || cmd == "config" || strings.ContainsAny(cmd, "/.:<") {
					// a path, a name (daemonset/nri-hcn-portmap), or service below
				} else if _, known := flags[cmd]; !known && !isProse(cmd) {
					bad(file, "nri-hcn-portmap %s: no such command", cmd)
					continue
				}
			}
			if (cmd == "service" || cmd == "config") && len(args) > 0 && !strings.HasPrefix(args[0], "-") && !strings.HasPrefix(args[0], "[") && args[0] != "|" {
				cmd, args = cmd+" "+args[0], args[1:]
				if _, ok := flags[cmd]; !ok {
					bad(file, "nri-hcn-portmap %s: no such command", cmd)
					continue
				}
			}
		}
		fs, ok := flags[cmd]
		if !ok || fs == nil {
			continue
		}
		for _, a := range args {
			a = strings.Trim(a, "[]'\",")
			if !strings.HasPrefix(a, "-") || a == "-" || a == "--" {
				continue
			}
			name := strings.TrimLeft(strings.SplitN(a, "=", 2)[0], "-")
			if name == "" || strings.ContainsAny(name, "\\|") {
				continue
			}
			if !fs[name] {
				bad(file, "nri-hcn-portmap %s: no flag --%s", cmd, name)
			}
		}
	}
}

// isProse: words that follow the program's name in prose-like code (a
// release or object named nri-hcn-portmap), not a command.
func isProse(w string) bool {
	switch w {
	case "deploy", "-n", "on", "is", "runs":
		return true
	}
	return false
}

// Issue 48: the service's upgrade in docs/operating.md works on Windows,
// where a running executable is locked and Expand-Archive refuses to
// overwrite: the service stopped (and waited for) first, the files
// replaced with -Force, then started; and the uninstall names what it
// leaves on the node, each with how to remove it.
func TestTheServicesUpgradeAndUninstallAreWrittenForWindows(t *testing.T) {
	b, err := os.ReadFile("../../docs/operating.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	upgrade, _, _ := strings.Cut(doc[strings.Index(doc, "\n## Upgrade\n"):], "\n## Uninstall\n")
	block, _, _ := strings.Cut(upgrade[strings.Index(upgrade, "```powershell\n")+len("```powershell\n"):], "```")
	var steps []string
	for _, l := range strings.Split(strings.TrimSpace(block), "\n") {
		steps = append(steps, strings.Fields(l)[0])
	}
	if strings.Join(steps, " ") != "Stop-Service Expand-Archive Start-Service" || !strings.Contains(block, " -Force") {
		t.Errorf("the service's upgrade: %q; want Stop-Service (which waits), Expand-Archive ... -Force, Start-Service", block)
	}
	uninstall := doc[strings.Index(doc, "\n## Uninstall\n"):]
	// issue 55: the uninstall stops the service and waits before cleanup,
	// which refuses while the plugin answers (sc.exe stop does not wait)
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for where, text := range map[string]string{"docs/operating.md": uninstall, "README.md": string(readme)} {
		for _, block := range strings.Split(text, "```powershell\n")[1:] {
			block, _, _ = strings.Cut(block, "```")
			if !strings.Contains(block, " cleanup ") {
				continue
			}
			if first := strings.Fields(block)[0]; first != "Stop-Service" || strings.Contains(block, "\nsc.exe stop") {
				t.Errorf("%s: the service's uninstall begins %q; want Stop-Service (which waits) before cleanup:\n%s", where, first, block)
			}
		}
	}
	for _, left := range []string{"Remove-HnsNetwork", `C:\ProgramData\nri-hcn-portmap`, "delete serviceaccount", "delete clusterrolebinding", "Remove-NetFirewallRule"} {
		if !strings.Contains(uninstall, left) {
			t.Errorf("the uninstall does not say how to remove what it leaves: no %q", left)
		}
	}
}

// Issue 55: a service node is scraped as documented. The README's service
// configuration serves metrics on the port the static job of
// docs/operating.md ("Scraping") targets, and the firewall rule beside it
// opens that port to Prometheus' addresses alone.
func TestTheServicesConfigurationServesWhatItsScrapeJobReads(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	ops, err := os.ReadFile("../../docs/operating.md")
	if err != nil {
		t.Fatal(err)
	}
	service, _, _ := strings.Cut(string(readme)[strings.Index(string(readme), "### As a Windows service"):], "\n## ")
	var cfg config.Config
	for _, c := range codeOf(service) {
		if c.block && c.lang == "toml" {
			cfg = config.Default()
			if err := config.Decode("README.md", []byte(c.text), &cfg); err != nil {
				t.Fatal(err)
			}
		}
	}
	job := regexp.MustCompile(`job_name: nri-hcn-portmap-service\s+static_configs:\s+- targets: \["[0-9.]+:([0-9]+)"\]`).FindStringSubmatch(string(ops))
	if job == nil {
		t.Fatal("docs/operating.md has no static job for the service")
	}
	if _, port, _ := strings.Cut(cfg.Admin.MetricsListen, ":"); port != job[1] {
		t.Errorf("the README's service configuration serves metrics at %q; the static job scrapes port %s", cfg.Admin.MetricsListen, job[1])
	}
	rule := regexp.MustCompile(`New-NetFirewallRule [^\n]*-LocalPort ([0-9]+)[^\n]*`).FindStringSubmatch(service)
	if rule == nil || rule[1] != job[1] || !strings.Contains(rule[0], "-RemoteAddress ") {
		t.Errorf("the README's service firewall rule %q: want port %s opened to Prometheus' addresses (-RemoteAddress)", rule, job[1])
	}
}
