package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"
)

// cleanupCmd removes every endpoint the plugin created (for uninstall).
func cleanupCmd(args []string, stdout, stderr io.Writer) error {
	cfg, _, err := parse("cleanup", args, stderr, nil)
	if err != nil {
		return err
	}
	mgr, err := newManager(context.Background(), cfg.HCN, nil, nil)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	eps, err := mgr.OwnedEverywhere(ctx)
	if err != nil {
		return err
	}
	var errs []error
	for _, ep := range eps {
		if err := mgr.RemoveEndpoint(ctx, ep); err != nil {
			errs = append(errs, err)
			continue
		}
		fmt.Fprintf(stdout, "removed %s (%s)\n", ep.Name, ep.ID)
	}
	fmt.Fprintf(stdout, "%d of %d endpoints removed\n", len(eps)-len(errs), len(eps))
	return errors.Join(errs...)
}
