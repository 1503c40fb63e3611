package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/containerd"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/status"
)

func statusCmd(args []string, stdout, stderr io.Writer) error {
	var format string
	cfg, _, err := parse("status", args, stderr, func(fs *flag.FlagSet) {
		outputFlag(fs, &format)
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
	entries := status.Entries(ctx, mgr, sbs, eps)
	if views, err := runningMappings(ctx, cfg.Admin.Listen); err != nil {
		fmt.Fprintf(stderr, "nri-hcn-portmap: note: the running plugin does not answer at %s (%v); what the CNI maps is not shown\n", cfg.Admin.Listen, err)
	} else {
		entries = status.WithCNI(entries, views)
	}
	return status.Write(stdout, entries, format)
}

// runningMappings asks the running plugin (its admin address) who maps each
// host port of each pod.
func runningMappings(ctx context.Context, admin string) ([]plugin.SandboxMappings, error) {
	if admin == "" {
		return nil, errors.New("admin.listen is empty")
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+admin+"/mappings", nil)
	if err != nil {
		return nil, err
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /mappings: %s", res.Status)
	}
	var views []plugin.SandboxMappings
	return views, json.NewDecoder(res.Body).Decode(&views)
}
