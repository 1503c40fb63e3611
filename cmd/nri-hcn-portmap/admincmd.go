package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"sync/atomic"
	"syscall"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/admin"

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
	key, at := "admin.listen", cfg.Admin.Listen
	url := "http://" + cfg.Admin.Listen
	client := &http.Client{Timeout: config.AdminClientTimeout}
	// reached: the private channel was opened, so a request that fails
	// after it was hung up on by the plugin (a peer it does not take), in
	// whichever way the transport reports the closed connection (EOF, a
	// reset, a broken pipe, or an idle connection closed before the
	// request was written).
	var reached atomic.Bool
	if what == "reload" { // the private channel: a pipe or socket only the node's administrators may open
		key, at, url = "admin.socket", cfg.Admin.Socket, "http://plugin"
		client.Transport = &http.Transport{DisableKeepAlives: true, DialContext: func(context.Context, string, string) (net.Conn, error) {
			c, err := admin.DialPrivate(at)
			if err == nil {
				reached.Store(true)
			}
			return c, err
		}}
	}
	if at == "" {
		return fmt.Errorf("%s is empty: the plugin serves no %s", key, map[bool]string{true: "reload", false: "admin endpoints"}[what == "reload"])
	}
	var (
		res *http.Response
		err error
	)
	switch {
	case what == "reload":
		res, err = client.Post(url+"/reload", "application/json", nil)
	case live:
		res, err = client.Get(url + "/livez")
	default:
		res, err = client.Get(url + "/healthz")
	}
	if err != nil {
		var timeout net.Error
		hungUp := reached.Load() && !(errors.As(err, &timeout) && timeout.Timeout())
		if hungUp || errors.Is(err, fs.ErrPermission) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || errors.Is(err, io.EOF) {
			err = fmt.Errorf("%w (%s is for the node's administrators: run this as root, or from an elevated prompt)", err, key)
		}
		if cfgErr != nil {
			return fmt.Errorf("%s: no plugin answers at %s, the address the configuration file writes (or the default where it writes none); the file itself does not load: %w", what, at, cfgErr)
		}
		return fmt.Errorf("%s: no plugin answers at %s: %w", what, at, err)
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
