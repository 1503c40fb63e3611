package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/config"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin"
	"github.com/sirupsen/logrus"
)

// newManager wires the HCN manager; log hears what it does to its network
// (nil: nobody).
func newManager(ctx context.Context, cfg config.HCN, observe hcn.ObserveFunc, log *logrus.Entry) (*hcn.Manager, error) {
	svc, err := newService(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("hcn backend %q: %w", cfg.Backend, err)
	}
	svc = hcn.Bounded(svc, cfg.CallTimeout.Duration)
	if observe != nil {
		svc = hcn.Instrumented(svc, observe)
	}
	mc := plugin.ManagerConfig(cfg)
	mc.Announce = func(n hcn.Network, what string) {
		if log != nil {
			log.WithFields(logrus.Fields{"network": n.Name, "network_id": n.ID, "type": string(n.Type),
				"subnet": fmt.Sprint(n.Subnets), "gateway": n.Gateway, "what": what}).Info("HNS network for the plugin's endpoints")
		}
	}
	mc.Shadowed = func(n hcn.Network, overlaps []string) {
		if log != nil {
			log.WithFields(logrus.Fields{"network": n.Name, "network_id": n.ID, "subnet": fmt.Sprint(n.Subnets), "overlaps": strings.Join(overlaps, "; ")}).
				Warn("the NAT network's subnet overlaps other ranges, taken as hcn.allow_subnet_overlap says: pods with mapped host ports get an on-link " +
					"route for it and cannot reach the addresses it overlaps; set hcn.subnet (and hcn.gateway) to a range clear of them and recreate the network")
		}
	}
	return hcn.NewManager(svc, mc), nil
}
