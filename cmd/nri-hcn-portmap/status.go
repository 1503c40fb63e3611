package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/config"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/containerd"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/hostsockets"
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
	pctx, pcancel := context.WithTimeout(ctx, config.ContainerdPingTimeout)
	if err := store.Ping(pctx); err != nil {
		fmt.Fprintf(stderr, "nri-hcn-portmap: warning: containerd does not answer at %s; pod names and orphans are not shown\n", cfg.Containerd.Address)
		sbs = nil
	}
	pcancel()
	entries := status.Entries(ctx, mgr, sbs, eps)
	if socks, err := (hostsockets.OS{}).On(ctx, hostsockets.PortsOf(status.Mapped(entries))); err != nil {
		fmt.Fprintf(stderr, "nri-hcn-portmap: note: the node's sockets are not read, so a program a mapping shadows is not shown: %v\n", err)
	} else {
		entries = status.WithShadowed(entries, socks)
	}
	if views, err := runningMappings(ctx, cfg.Admin); err != nil {
		fmt.Fprintf(stderr, "nri-hcn-portmap: note: what the CNI maps is not shown: %v\n", err)
	} else {
		entries = status.WithCNI(entries, views)
	}
	return status.Write(stdout, entries, format)
}

// runningMappings asks the running plugin (its admin address) who maps each
// host port of each pod.
func runningMappings(ctx context.Context, a config.Admin) ([]plugin.SandboxMappings, error) {
	res, err := newAdminClient(a).get(ctx, "/mappings")
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
