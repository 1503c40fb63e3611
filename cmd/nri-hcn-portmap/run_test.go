package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/config"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/admin"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/test/testfs"
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

// Issue 53: whatever stops a service before it reaches the SCM (its
// configuration unreadable, one others may change, a log folder others may
// change) goes to the Windows event log, once, as well as to the caller;
// run from a console, nothing is written there.
func TestAServicesStartUpRefusalGoesToTheEventLog(t *testing.T) {
	dir := testfs.TempDir(t)
	bad := filepath.Join(dir, "bad.toml")
	must(t, os.WriteFile(bad, []byte("[hcn]\nnetwrok = \"nat\"\n"), 0o600))
	rows := []struct {
		name string
		args []string
		says string
	}{
		{"a configuration that does not decode", []string{"--config", bad}, "netwrok"},
		{"a flag's bad value", []string{"--log-level", "loud"}, "loud"},
	}
	if runtime.GOOS != "windows" { // the file modes the check reads on Linux (wine keeps no ACLs)
		open := filepath.Join(dir, "open.toml")
		must(t, os.WriteFile(open, []byte("[hcn]\n"), 0o666))
		must(t, os.Chmod(open, 0o666))
		shared := filepath.Join(dir, "shared")
		must(t, os.Mkdir(shared, 0o777))
		must(t, os.Chmod(shared, 0o777))
		good := filepath.Join(dir, "good.toml")
		must(t, os.WriteFile(good, []byte("[log]\nfile = \""+filepath.Join(shared, "plugin.log")+"\"\n"), 0o600))
		rows = append(rows,
			struct {
				name string
				args []string
				says string
			}{"a configuration others may change", []string{"--config", open}, "may be changed by others"},
			struct {
				name string
				args []string
				says string
			}{"a log folder others may change", []string{"--config", good}, shared})
	}
	for _, tc := range rows {
		t.Run(tc.name, func(t *testing.T) {
			for _, isService := range []bool{true, false} {
				var said []string
				err := runAs(append([]string{}, tc.args...), io.Discard, isService, func(m string) { said = append(said, m) })
				if err == nil || !strings.Contains(err.Error(), tc.says) {
					t.Fatalf("run: %v, want it stopped, saying %q", err, tc.says)
				}
				switch {
				case isService && (len(said) != 1 || !strings.Contains(said[0], "nri-hcn-portmap cannot start: ") || !strings.Contains(said[0], tc.says)):
					t.Errorf("as a service, the event log got %q; want the refusal once", said)
				case !isService && len(said) != 0:
					t.Errorf("from a console, the event log got %q", said)
				}
			}
		})
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// Issue 54: a run that cannot bind the admin address (a second one, tried
// in a console while the service runs) leaves the key as it was, so the
// running plugin's answers still prove themselves; a run that binds writes
// a new one.
func TestARunThatCannotBindLeavesTheRunningPluginsKey(t *testing.T) {
	keyFile := filepath.Join(testfs.TempDir(t), "admin", "admin.key")
	running, err := admin.NewKey(keyFile)
	must(t, err)
	held, err := net.Listen("tcp", "127.0.0.1:0") // the running plugin's address
	must(t, err)
	defer held.Close()
	log := logrus.NewEntry(logrus.New())
	log.Logger.SetOutput(io.Discard)
	second := func(addr string) (func(context.Context), error) {
		cfg := config.Default()
		cfg.Admin.Listen, cfg.Admin.KeyFile, cfg.Admin.Socket, cfg.Admin.MetricsListen = addr, keyFile, "", ""
		return (&app{cfg: cfg, log: log, admin: &admin.Admin{Log: log}}).listen()
	}
	if _, err := second(held.Addr().String()); err == nil {
		t.Fatal("a second run bound the running plugin's address")
	}
	if key, err := admin.ReadKey(keyFile); err != nil || string(key) != string(running) {
		t.Fatalf("the key after a run that could not bind: %v; want the running plugin's", err)
	}
	serve, err := second("127.0.0.1:0")
	must(t, err)
	_ = serve // bound, not served: the listeners end with the test
	if key, err := admin.ReadKey(keyFile); err != nil || string(key) == string(running) {
		t.Fatalf("the key after a run that bound: %v; want a new one", err)
	}
}
