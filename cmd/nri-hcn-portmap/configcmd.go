package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/pelletier/go-toml/v2"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/config"
)

const configUsage = `Usage:
  nri-hcn-portmap config default            the default configuration, as TOML: every key
  nri-hcn-portmap config dump [flags]       the configuration in effect: the file (--config, or the
                                            default path), the flags over it, validated as at start
`

// configCmd prints the default or the effective configuration, as
// containerd's config default and config dump do; the output decodes
// back to the same configuration.
func configCmd(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, configUsage)
		return usageError{error: errors.New("config: want default or dump")}
	}
	var cfg config.Config
	switch args[0] {
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, configUsage)
		return nil
	case "default":
		fs := newFlagSet("config default", stderr)
		if err := parseArgs(fs, args[1:]); err != nil {
			return err
		}
		cfg = config.Default()
	case "dump":
		var err error
		if cfg, _, err = parse("config dump", args[1:], stderr, nil); err != nil {
			return err
		}
	default:
		fmt.Fprint(stderr, configUsage)
		return usageError{error: fmt.Errorf("config: unknown subcommand %q (want default or dump)", args[0])}
	}
	b, err := toml.Marshal(cfg)
	if err != nil {
		return err
	}
	_, err = stdout.Write(b)
	return err
}
