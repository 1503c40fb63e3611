package main

import (
	"flag"
	"fmt"
	"io"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/config"
)

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
