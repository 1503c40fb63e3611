package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/config"
)

// adminCmd asks the running plugin's admin endpoint: health (/healthz, or
// /livez with --live, at admin.listen) or reload (POST /reload, on
// admin.socket: the node's administrators alone). The configuration file
// only says where the plugin answers; the plugin re-reads its own.
func adminCmd(what string, args []string, stdout, stderr io.Writer) error {
	var live bool
	cfg, _, cfgErr := parse(what, args, stderr, func(fs *flag.FlagSet) {
		fs.Lookup("config").Usage = "the plugin's configuration file: only where it answers (admin.listen, admin.socket) is read here (the plugin re-reads its own file)"
		if what == "health" {
			fs.BoolVar(&live, "live", false, "liveness only (/livez): the process serves and its loops run; HNS and containerd are not asked")
		}
	})
	if errors.Is(cfgErr, flag.ErrHelp) || errors.As(cfgErr, new(usageError)) {
		return cfgErr
	}
	if cfgErr != nil {
		// A file the running plugin would reject must not keep us from
		// asking it: it answers for itself (a reload is then rejected
		// there, and counted). The address comes from the flag, the file
		// or the default; the local error is told only if that fails.
		if cfg.Admin.Listen == "" {
			cfg.Admin.Listen = config.Default().Admin.Listen
		}
		if cfg.Admin.Socket == "" {
			cfg.Admin.Socket = config.Default().Admin.Socket
		}
	}
	if cfg.Admin.KeyFile == "" {
		cfg.Admin.KeyFile = config.Default().Admin.KeyFile
	}
	c := newAdminClient(cfg.Admin)
	key, at := "admin.listen", cfg.Admin.Listen
	var (
		res *http.Response
		err error
	)
	switch {
	case what == "reload":
		key, at = "admin.socket", cfg.Admin.Socket
		res, err = c.postPrivate(context.Background(), "/reload")
	case live:
		res, err = c.get(context.Background(), "/livez")
	default:
		res, err = c.get(context.Background(), "/healthz")
	}
	if err != nil {
		if cfgErr != nil {
			return fmt.Errorf("%s: no plugin answers at %s (%s), the address the configuration file writes (or the default where it writes none): %w; "+
				"the file itself does not load: %w", what, at, key, err, cfgErr)
		}
		return fmt.Errorf("%s: %w", what, err)
	}
	defer res.Body.Close()
	if what == "health" {
		_, _ = io.Copy(stdout, res.Body)
		if res.StatusCode != http.StatusOK {
			return fmt.Errorf("health: %s", res.Status)
		}
		return nil
	}
	var answer struct{ Result, Message, Error string }
	if err := json.NewDecoder(res.Body).Decode(&answer); err != nil {
		return fmt.Errorf("reload: %s, and an answer that is not JSON: %w", res.Status, err)
	}
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("reload rejected by the plugin (%s); the configuration in force stays: %s", res.Status, answer.Error)
	}
	fmt.Fprintln(stdout, "reloaded:", answer.Message)
	return nil
}
