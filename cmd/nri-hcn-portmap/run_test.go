package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/config"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
)

// A network the plugin may not use (an L2Bridge network named by
// hcn.network, without hcn.allow_cni_network) stops it at start with an
// error naming the key, rather than leaving it running and never ready: a
// restart cannot change it.
func TestANetworkThePluginMayNotUseStopsItAtStart(t *testing.T) {
	hns := newTestHNS(t)
	name := fmt.Sprint("l2-", time.Now().UnixNano())
	// (on a shared HNS the network stays: the service deletes none)
	if _, err := hns.svc.CreateNetwork(context.Background(), hcn.NetworkSpec{Name: name, Type: hcn.NetworkL2Bridge, Subnet: "10.1.0.0/24", Gateway: "10.1.0.1"}); err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	hns.use(&cfg.HCN)
	cfg.HCN.Network = name
	cfg.Admin.Listen, cfg.Admin.Socket = "", ""
	log := logrus.NewEntry(logrus.New())
	log.Logger.SetOutput(io.Discard)
	a, err := build(context.Background(), cfg, nil, log, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // a guard against a hang
	defer cancel()
	err = a.run(ctx)
	if !errors.Is(err, hcn.ErrInvalid) || !strings.Contains(err.Error(), `hcn.network = "`+name+`"`) || ctx.Err() != nil {
		t.Fatalf("run = %v; want it stopped at start naming hcn.network", err)
	}
}
