package main

import (
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/config"
)

// usageError: the command line itself is wrong, and the flag package has
// already printed why and the command's usage; the exit status is 2.
type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

// parse parses a command's flags: --config, the override flags of keys
// (every one when none is given) and extra's, then resolves the
// configuration.
func parse(name string, args []string, stderr io.Writer, extra func(fs *flag.FlagSet), keys ...string) (config.Config, *config.Flags, error) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	flags := config.RegisterFlagsFor(fs, keys...)
	if extra != nil {
		extra(fs)
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return config.Config{}, nil, err
		}
		return config.Config{}, nil, usageError{err} // the flag package has said it, with the usage
	}
	if fs.NArg() > 0 {
		return config.Config{}, nil, fmt.Errorf("%s: unexpected argument %q", name, fs.Arg(0))
	}
	cfg, err := flags.Resolve()
	return cfg, flags, err
}
