package main

import (
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/config"
)

// usageError: the command line itself is wrong; the exit status is 2.
// said: why (and the command's usage) is printed already, by the flag
// package or usagef.
type usageError struct {
	error
	said bool
}

func (e usageError) Unwrap() error { return e.error }

// usagef is a wrong command line, said (with the command's usage) and
// exiting 2.
func usagef(fs *flag.FlagSet, format string, args ...any) error {
	err := fmt.Errorf(format, args...)
	fmt.Fprintln(fs.Output(), err)
	fs.Usage()
	return usageError{err, true}
}

// newFlagSet is a command's flag set, its usage written as the docs write
// flags: --name, and a one-letter flag with its long form on one line
// (-o, --output).
func newFlagSet(name string, out io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(out)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage of %s:\n", name)
		printFlags(fs)
	}
	return fs
}

// longForms are the long forms registered beside a one-letter flag.
var longForms = map[string]string{"o": "output"}

// printFlags writes fs's flags: "  --name type" (or "  -o, --output type"),
// then the usage indented below.
func printFlags(fs *flag.FlagSet) {
	shown := map[string]bool{}
	for short, long := range longForms {
		if fs.Lookup(short) != nil {
			shown[long] = true // with its short form
		}
	}
	fs.VisitAll(func(f *flag.Flag) {
		if shown[f.Name] {
			return
		}
		kind, usage := flag.UnquoteUsage(f)
		names := "--" + f.Name
		if len(f.Name) == 1 {
			names = "-" + f.Name
			if long, ok := longForms[f.Name]; ok && fs.Lookup(long) != nil {
				names += ", --" + long
			}
		}
		if kind != "" {
			names += " " + kind
		}
		fmt.Fprintf(fs.Output(), "  %s\n    \t%s\n", names, usage)
	})
}

// parseArgs parses a command's command line: -h is flag.ErrHelp, a flag
// the command does not have or an argument it takes none of is a
// usageError (said, with the usage).
func parseArgs(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err, true} // the flag package has said it, with the usage
	}
	if fs.NArg() > 0 {
		return usagef(fs, "%s: unexpected argument %q", fs.Name(), fs.Arg(0))
	}
	return nil
}

// commandKeys are the configuration keys each command reads, and so the
// only override flags it offers; run and config dump offer every one.
var commandKeys = map[string][]string{
	"status":  {"hcn.backend", "hcn.simulator_address", "containerd.address", "admin.listen", "admin.key_file"},
	"cleanup": {"hcn.backend", "hcn.simulator_address", "admin.listen", "admin.key_file"},
	"doctor":  {"hcn.backend", "hcn.simulator_address", "containerd.address", "nri.socket", "plugin.source", "admin.listen", "admin.key_file"},
	"health":  {"admin.listen", "admin.key_file"},
	"reload":  {"admin.socket"},
}

// outputFlag is -o and its long form --output: table (the default) or
// json, anything else a wrong command line.
func outputFlag(fs *flag.FlagSet, v *string) {
	*v = "table"
	fs.Var((*output)(v), "o", "output `format`: table or json")
	fs.Var((*output)(v), "output", "the same as -o")
}

type output string

func (o *output) String() string { return string(*o) }

func (o *output) Set(s string) error {
	if s != "table" && s != "json" {
		return fmt.Errorf("want table or json")
	}
	*o = output(s)
	return nil
}

// parse parses a command's flags: --config, the override flags of the
// command's keys (commandKeys) and extra's, then resolves the
// configuration. A wrong command line is a usageError (exit 2).
func parse(name string, args []string, stderr io.Writer, extra func(fs *flag.FlagSet)) (config.Config, *config.Flags, error) {
	fs := newFlagSet(name, stderr)
	flags := config.RegisterFlagsFor(fs, commandKeys[name]...)
	if extra != nil {
		extra(fs)
	}
	if err := parseArgs(fs, args); err != nil {
		return config.Config{}, nil, err
	}
	cfg, err := flags.Resolve()
	return cfg, flags, err
}
