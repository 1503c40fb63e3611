package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/containerd"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/status"
)

func statusCmd(args []string, stdout, stderr io.Writer) error {
	var format string
	cfg, _, err := parse("status", args, stderr, func(fs *flag.FlagSet) {
		fs.StringVar(&format, "o", "table", "output format: table or json")
	})
	if err != nil {
		return err
	}
	mgr, err := newManager(context.Background(), cfg.HCN, nil, nil)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.HCN.CallTimeout.Duration)
	defer cancel()
	eps, err := mgr.OwnedEverywhere(ctx)
	if err != nil {
		return err
	}
	store := containerd.NewStore(cfg.Containerd.Address, cfg.Containerd.Namespace)
	defer store.Close()
	var sbs plugin.SandboxStore = store
	pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
	if err := store.Ping(pctx); err != nil {
		fmt.Fprintf(stderr, "nri-hcn-portmap: warning: containerd does not answer at %s; pod names and orphans are not shown\n", cfg.Containerd.Address)
		sbs = nil
	}
	pcancel()
	return status.Write(stdout, status.Entries(ctx, mgr, sbs, eps), format)
}
