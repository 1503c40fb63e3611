package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/config"
)

// adminCmd asks the running plugin's admin endpoint.
func adminCmd(what string, args []string, stdout, stderr io.Writer) error {
	cfg, _, err := parse(what, args, stderr, nil)
	if errors.Is(err, flag.ErrHelp) {
		return err
	}
	if err != nil {
		// A file the running plugin would reject must not keep us from
		// asking it: it answers for itself (a reload is then rejected
		// there, and counted). The address comes from the flag, the file or
		// the default.
		fmt.Fprintln(stderr, "nri-hcn-portmap: warning:", err)
		if cfg.Admin.Listen == "" {
			cfg.Admin.Listen = config.Default().Admin.Listen
		}
	}
	if cfg.Admin.Listen == "" {
		return errors.New("admin.listen is empty: the plugin serves no admin endpoints")
	}
	url := "http://" + cfg.Admin.Listen
	client := &http.Client{Timeout: 10 * time.Second}
	var res *http.Response
	if what == "health" {
		res, err = client.Get(url + "/healthz")
	} else {
		res, err = client.Post(url+"/reload", "application/json", nil)
	}
	if err != nil {
		return fmt.Errorf("%s: the plugin's admin endpoint %s: %w", what, cfg.Admin.Listen, err)
	}
	defer res.Body.Close()
	_, _ = io.Copy(stdout, res.Body)
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", what, res.Status)
	}
	return nil
}
