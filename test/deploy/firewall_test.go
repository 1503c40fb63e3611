package deploy

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// escapeArg is golang.org/x/sys/windows.EscapeArg (v0.49.0,
// exec_windows.go; syscall.EscapeArg is the same), which containerd
// (internal/cri/opts/spec_windows.go) and hcsshim (internal/cmd/cmd.go)
// join a container's arguments with: a quote is escaped as \", the
// backslashes before it doubled, and the argument is put in quotes only
// when it holds a space or a tab (then the backslashes that end it are
// doubled too).
func escapeArg(s string) string {
	if s == "" {
		return `""`
	}
	if !strings.ContainsAny(s, " \t\"\\") {
		return s
	}
	space := strings.ContainsAny(s, " \t")
	var b strings.Builder
	if space {
		b.WriteByte('"')
	}
	slashes := 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '\\':
			slashes++
		case '"':
			b.WriteString(strings.Repeat(`\`, slashes+1))
			slashes = 0
		default:
			slashes = 0
		}
		b.WriteByte(s[i])
	}
	if space {
		b.WriteString(strings.Repeat(`\`, slashes))
		b.WriteByte('"')
	}
	return b.String()
}

// commandLine is the process command line containerd and hcsshim build.
// With the bind filter hcsshim runs it through "cmd /c " (hostProcess).
func commandLine(argv []string, bindflt bool) string {
	parts := make([]string, len(argv))
	for i, a := range argv {
		parts[i] = escapeArg(a)
	}
	line := strings.Join(parts, " ")
	if bindflt {
		line = "cmd /c " + line
	}
	return line
}

// splitProgram splits a command line into its program and the rest, at
// the first blank outside quotes.
func splitProgram(line string) (string, string) {
	line = strings.TrimLeft(line, " ")
	quoted := false
	for i := 0; i < len(line); i++ {
		switch {
		case line[i] == '"':
			quoted = !quoted
		case line[i] == ' ' && !quoted:
			return strings.Trim(line[:i], `"`), strings.TrimLeft(line[i:], " ")
		}
	}
	return strings.Trim(line, `"`), ""
}

// cmdC is what cmd.exe /c runs of rest (cmd /?): where rest opens with a
// quote, the first and the last quote are removed, except in the one case
// that keeps them (keepsQuotes); && outside quotes separates commands,
// each run with the rest of its text as its command line (a backslash is
// no escape to cmd).
func cmdC(rest string) [][2]string {
	rest = strings.TrimLeft(rest, " ")
	if strings.HasPrefix(rest, `"`) && !keepsQuotes(rest) {
		if last := strings.LastIndex(rest, `"`); last > 0 {
			rest = rest[1:last] + rest[last+1:]
		}
	}
	var out [][2]string
	quoted, start := false, 0
	for i := 0; i <= len(rest); i++ {
		if i < len(rest) && rest[i] == '"' {
			quoted = !quoted
		}
		if i == len(rest) || (!quoted && strings.HasPrefix(rest[i:], "&&")) {
			prog, args := splitProgram(rest[start:i])
			out = append(out, [2]string{prog, strings.TrimRight(args, " ")})
			start = i + 2
			i++
		}
	}
	return out
}

// keepsQuotes is cmd /c's case that keeps the quotes of its command line
// (cmd /?): exactly two quotes, no special character (&<>()@^|) and at
// least one blank between them, and between them the name of an
// executable file (modelled by its extension).
func keepsQuotes(rest string) bool {
	if strings.Count(rest, `"`) != 2 {
		return false
	}
	inner := rest[1 : 1+strings.Index(rest[1:], `"`)]
	ext := strings.ToLower(inner[strings.LastIndex(inner, ".")+1:])
	return !strings.ContainsAny(inner, "&<>()@^|") && strings.ContainsAny(inner, " \t") &&
		(ext == "exe" || ext == "com" || ext == "bat" || ext == "cmd")
}

// argvOf parses a command line as CommandLineToArgvW does (and so
// PowerShell 5.1's entry point): 2n backslashes before a quote are n and
// the quote toggles quoting; 2n+1 are n and a literal quote.
func argvOf(line string) []string {
	var out []string
	var cur strings.Builder
	inArg, quoted := false, false
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case c == '\\':
			n := 0
			for i < len(line) && line[i] == '\\' {
				n++
				i++
			}
			if i < len(line) && line[i] == '"' {
				cur.WriteString(strings.Repeat(`\`, n/2))
				if n%2 == 1 {
					cur.WriteByte('"')
				} else {
					quoted = !quoted
				}
			} else {
				cur.WriteString(strings.Repeat(`\`, n))
				i--
			}
			inArg = true
		case c == '"':
			quoted, inArg = !quoted, true
		case (c == ' ' || c == '\t') && !quoted:
			if inArg {
				out = append(out, cur.String())
				cur.Reset()
				inArg = false
			}
		default:
			cur.WriteByte(c)
			inArg = true
		}
	}
	if inArg {
		out = append(out, cur.String())
	}
	return out
}

// powerShellReceives runs a process's command line through the model:
// cmd.exe's /c (nested as often as it is), then PowerShell's own parsing;
// it returns the script each powershell.exe is given with -Command (its
// remaining arguments joined by blanks, as PowerShell joins them).
func powerShellReceives(line string) []string {
	var scripts []string
	prog, rest := splitProgram(line)
	var run func(prog, rest string)
	run = func(prog, rest string) {
		switch strings.ToLower(prog) {
		case "cmd", "cmd.exe":
			if r, ok := strings.CutPrefix(rest, "/c "); ok {
				for _, c := range cmdC(r) {
					run(c[0], c[1])
				}
			}
		case "powershell", "powershell.exe":
			args := argvOf(rest)
			for i, a := range args {
				if strings.EqualFold(a, "-Command") {
					scripts = append(scripts, strings.Join(args[i+1:], " "))
				}
			}
		}
	}
	run(prog, rest)
	return scripts
}

// Issue 38: the firewall steps reach PowerShell as a command, not as a
// string it would print and exit 0 on: the command line built as
// containerd and hcsshim build it (EscapeArg, then cmd /c with the bind
// filter), run through cmd.exe's /c and PowerShell's parsing. The
// cleanup's step was a quoted -Command inside cmd /c's one argument,
// which EscapeArg turned into \"...\" and PowerShell received as a string
// literal. The init container replaces a rule of its name, so a changed
// metrics.port is the rule's port.
func TestFirewallStepsReachPowerShellAsACommand(t *testing.T) {
	plugin := decodeAll(t, render(t, "nri-hcn-portmap", "metrics.firewallRule=true", "metrics.port=9500")).daemonSets[0]
	cleanup := decodeAll(t, render(t, "nri-hcn-portmap", "daemonset.enabled=false", "cleanup.enabled=true", "metrics.firewallRule=true")).daemonSets[0]
	inits := plugin.Spec.Template.Spec.InitContainers // no-service (issue 55), then the firewall's
	if len(inits) != 2 || inits[1].Name != "firewall" {
		t.Fatalf("init containers %+v", inits)
	}
	argv := func(c corev1.Container) []string { return append(append([]string{}, c.Command...), c.Args...) }
	steps := []struct {
		name string
		argv []string
		want []string // the scripts' commands, in order
	}{
		{"init container", argv(inits[1]), []string{
			"Remove-NetFirewallRule -Name 'nri-hcn-portmap-metrics' -ErrorAction SilentlyContinue; " +
				"New-NetFirewallRule -Name 'nri-hcn-portmap-metrics' -DisplayName 'nri-hcn-portmap metrics' -Direction Inbound -Protocol TCP -LocalPort 9500 -Action Allow | Out-Null"}},
		{"cleanup", argv(cleanup.Spec.Template.Spec.Containers[0]), []string{
			"Remove-NetFirewallRule -Name 'nri-hcn-portmap-metrics' -ErrorAction SilentlyContinue; exit 0"}},
	}
	for _, s := range steps {
		for _, bindflt := range []bool{true, false} {
			line := commandLine(s.argv, bindflt)
			if got := powerShellReceives(line); strings.Join(got, "\n") != strings.Join(s.want, "\n") {
				t.Errorf("%s (bindflt %v): PowerShell receives %q from %s; want %q", s.name, bindflt, got, line, s.want)
			}
		}
	}
	// the model tells the broken form: a quoted -Command inside cmd /c's
	// one argument reaches PowerShell as a string
	broken := []string{"cmd.exe", "/c", `x.exe cleanup && powershell.exe -NoLogo -Command "Remove-NetFirewallRule -Name 'r'; exit 0" && echo done`}
	if got := powerShellReceives(commandLine(broken, false)); len(got) != 1 || !strings.HasPrefix(got[0], `"`) {
		t.Errorf("the quoted -Command of the old cleanup reaches PowerShell as %q: the model cannot tell it from a command", got)
	}
}

// The model of how a command line is built and run is the upstream code's:
// EscapeArg quotes only an argument with a blank (x/sys), and cmd /c keeps
// the quotes around an executable's path with a blank in it (cmd /?),
// where it strips them from anything else (issue 47).
func TestTheCommandLineModelIsXSysAndCmds(t *testing.T) {
	for in, want := range map[string]string{
		"run": "run", "": `""`, `a"b`: `a\"b`, `C:\x\`: `C:\x\`, "a b": `"a b"`, `C:\Program Files\`: `"C:\Program Files\\"`,
		`say "hi" there`: `"say \"hi\" there"`, `x\"y`: `x\\\"y`,
	} {
		if got := escapeArg(in); got != want {
			t.Errorf("escapeArg(%q) = %q, want %q (x/sys EscapeArg)", in, got, want)
		}
	}
	for rest, want := range map[string][2]string{
		`"C:\Program Files\nri-hcn-portmap.exe" cleanup`: {`C:\Program Files\nri-hcn-portmap.exe`, "cleanup"},
		`"echo done" > x`: {"echo", `done > x`},
	} {
		got := cmdC(rest)
		if len(got) != 1 || got[0] != want {
			t.Errorf("cmd /c %s runs %q, want %q", rest, got, want)
		}
	}
}
