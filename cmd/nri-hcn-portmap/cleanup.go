package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/config"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/admin"
)

// errPluginRunning: cleanup found the plugin still running on this node.
var errPluginRunning = errors.New("the plugin still runs")

// cleanupCmd removes every endpoint the plugin created (for uninstall). It
// refuses while the plugin answers at admin.listen (a running plugin would
// rebuild what it removes, for every running pod), unless --force.
func cleanupCmd(args []string, stdout, stderr io.Writer) error {
	var force bool
	cfg, _, err := parse("cleanup", args, stderr, func(fs *flag.FlagSet) {
		fs.BoolVar(&force, "force", false, "remove the endpoints even while the plugin answers at admin.listen")
	})
	if err != nil {
		return err
	}
	if !force && cfg.Admin.Listen != "" {
		// the plugin's own answer (proved) stops the cleanup; another
		// program's on its address does not (the plugin does not run
		// where another answers); not being able to tell does
		res, err := newAdminClient(cfg.Admin).get(context.Background(), "/livez")
		switch {
		case err == nil:
			res.Body.Close()
			return fmt.Errorf("cleanup: %w (it answers at %s): stop it first, or it rebuilds the endpoints of running pods (--force removes them anyway)",
				errPluginRunning, cfg.Admin.Listen)
		case errors.Is(err, admin.ErrNotThePlugin):
			fmt.Fprintf(stderr, "nri-hcn-portmap: warning: %v; cleaning up\n", err)
		case !errors.Is(err, errNotAnswering):
			return fmt.Errorf("cleanup: whether the plugin still runs: %w (--force removes the endpoints anyway)", err)
		}
	}
	mgr, err := newManager(context.Background(), cfg.HCN, nil, nil)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), config.CleanupBound)
	defer cancel()
	eps, err := mgr.OwnedEverywhere(ctx)
	if err != nil {
		return err
	}
	var errs []error
	for _, ep := range eps {
		if _, err := mgr.Apply(ctx, hcn.Removal([]hcn.Endpoint{ep})); err != nil {
			errs = append(errs, err)
			continue
		}
		fmt.Fprintf(stdout, "removed %s (%s)\n", ep.Name, ep.ID)
	}
	fmt.Fprintf(stdout, "%d of %d endpoints removed\n", len(eps)-len(errs), len(eps))
	return errors.Join(errs...)
}
