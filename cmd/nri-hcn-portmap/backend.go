package main

import (
	"context"
	"fmt"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/config"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
)

func newManager(ctx context.Context, cfg config.HCN, observe hcn.ObserveFunc) (*hcn.Manager, error) {
	svc, err := newService(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("hcn backend %q: %w", cfg.Backend, err)
	}
	svc = hcn.Bounded(svc, cfg.CallTimeout.Duration)
	if observe != nil {
		svc = hcn.Instrumented(svc, observe)
	}
	return hcn.NewManager(svc, hcn.ManagerConfig{
		Network: hcn.NetworkSpec{Name: cfg.Network, Type: hcn.NetworkType(cfg.NetworkType), Subnet: cfg.Subnet,
			Gateway: cfg.Gateway, Adapter: cfg.Adapter},
		CreateNetwork: cfg.CreateNetwork,
		OutboundNAT:   cfg.OutboundNAT,
		IPv6:          cfg.DualStack,
		DefaultRoute:  hcn.RouteMode(cfg.DefaultRoute),
		RouteMetric:   uint16(cfg.RouteMetric),
	}), nil
}
