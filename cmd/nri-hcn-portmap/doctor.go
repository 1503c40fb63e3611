package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/config"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/admin"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/containerd"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/doctor"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/hostsockets"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/kube"
)

// doctorCmd checks the node (and with --selftest builds, reads back and
// removes a throwaway endpoint); it fails when a check fails.
func doctorCmd(args []string, stdout, stderr io.Writer) error {
	var (
		format   string
		selftest bool
		o        doctor.SelfTestOptions
		port     uint
		ctrCfg   string
	)
	cfg, _, err := parse("doctor", args, stderr, func(fs *flag.FlagSet) {
		outputFlag(fs, &format)
		fs.BoolVar(&selftest, "selftest", false, "also build a throwaway namespace and endpoint as the plugin does, read them back from HNS, compare, remove")
		fs.BoolVar(&o.Keep, "keep", false, "with --selftest: leave the namespace and endpoint for inspection (the next self-test removes them)")
		fs.UintVar(&port, "port", 47999, "with --selftest: the host port the throwaway endpoint maps")
		fs.StringVar(&ctrCfg, "containerd-config", config.DefaultContainerdConfig, "containerd's configuration file: which runtime handlers run Hyper-V pods, and whether they reach ncproxy")
	})
	if err != nil {
		return err
	}
	if port == 0 || port > 65535 {
		return usageError{error: fmt.Errorf("doctor: --port %d: want 1 to 65535", port)}
	}
	o.HostPort = uint16(port)
	ctx := context.Background()
	store := containerd.NewStore(cfg.Containerd.Address, cfg.Containerd.Namespace)
	defer store.Close()
	d := &doctor.Doctor{
		Config:     cfg,
		Containerd: store,
		Health:     func(ctx context.Context) (admin.HealthReport, error) { return askHealth(ctx, cfg.Admin) },
		Stat:       func(p string) error { _, err := os.Stat(p); return err },
		Listen: func(addr string) error {
			l, err := net.Listen("tcp", addr)
			if err == nil {
				l.Close()
			}
			return err
		},
		Windows: onWindows,
		OSBuild: osBuild(),
		Sockets: hostsockets.OS{},
		RuntimeHandlers: func() ([]containerd.RuntimeHandler, error) {
			data, err := os.ReadFile(ctrCfg)
			if errors.Is(err, os.ErrNotExist) { // containerd runs on its defaults: no Hyper-V handler
				return nil, nil
			}
			if err != nil {
				return nil, err
			}
			hs, err := containerd.RuntimeHandlers(data)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", ctrCfg, err)
			}
			return hs, nil
		},
	}
	if cfg.Kubernetes.Enabled {
		api, err := newKubeAPI(cfg.Kubernetes)
		node := cmp.Or(cfg.Kubernetes.NodeName, os.Getenv("NODE_NAME"))
		d.NodeRestriction = func(ctx context.Context) (bool, error) {
			if err != nil {
				return false, err
			}
			ctx, cancel := context.WithTimeout(ctx, config.APICallTimeout)
			defer cancel()
			return api.ProbeNodeRestriction(ctx, node)
		}
		d.PolicyKinds = func(ctx context.Context) ([]string, error) {
			if err != nil {
				return nil, err
			}
			ctx, cancel := context.WithTimeout(ctx, config.APICallTimeout)
			defer cancel()
			return api.ServedKinds(ctx, kube.PolicyKinds())
		}
	}
	d.HNS, d.HNSErr = newNode(ctx, cfg.HCN)
	rep := d.Run(ctx)
	if selftest {
		rep.Results = append(rep.Results, d.SelfTest(ctx, o).Results...)
	}
	if err := doctor.Write(stdout, rep, format); err != nil {
		return err
	}
	if !rep.Fit() {
		return errors.New("doctor: the node is not fit for the plugin (see the failed checks)")
	}
	return nil
}

// askHealth reads the running plugin's /healthz; doctor.ErrNotRunning when
// nothing answers there, admin.ErrNotThePlugin when another program does.
func askHealth(ctx context.Context, a config.Admin) (admin.HealthReport, error) {
	var rep admin.HealthReport
	res, err := newAdminClient(a).get(ctx, "/healthz")
	if errors.Is(err, errNotAnswering) {
		return rep, fmt.Errorf("%w: %w", doctor.ErrNotRunning, err)
	}
	if err != nil {
		return rep, err
	}
	defer res.Body.Close()
	if err := json.NewDecoder(res.Body).Decode(&rep); err != nil {
		return rep, fmt.Errorf("%s/healthz (%s): %w", a.Listen, res.Status, err)
	}
	return rep, nil
}
