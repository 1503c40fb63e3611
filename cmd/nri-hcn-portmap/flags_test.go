package main

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
)

// Issue 39: every command's -h exits 0 (version's too) and writes its
// flags as the docs write them: --name, never -name for a long flag, and
// -o with its long form on one line, not two flags.
func TestHelpWritesFlagsAsTheDocsDo(t *testing.T) {
	singleDashLong := regexp.MustCompile(`(?m)^\s+-[a-z][a-z-]+\b`)
	for _, args := range [][]string{{"run", "-h"}, {"status", "-h"}, {"health", "-h"}, {"reload", "-h"}, {"cleanup", "-h"},
		{"doctor", "-h"}, {"config", "dump", "-h"}, {"config", "default", "-h"}, {"service", "install", "-h"}, {"version", "-h"}} {
		var stdout, stderr bytes.Buffer
		if code := mainArgs(args, &stdout, &stderr); code != 0 {
			t.Errorf("%v: exit %d, want 0\n%s", args, code, stderr.String())
		}
		help := stdout.String() + stderr.String()
		if !strings.HasPrefix(strings.TrimSpace(help), "Usage") {
			t.Errorf("%v: no usage:\n%s", args, help)
		}
		if m := singleDashLong.FindString(help); m != "" {
			t.Errorf("%v: a long flag written with one dash, %q:\n%s", args, strings.TrimSpace(m), help)
		}
		if strings.Contains(help, "--output") && !strings.Contains(help, "-o, --output format") {
			t.Errorf("%v: -o and --output shown apart:\n%s", args, help)
		}
	}
}
