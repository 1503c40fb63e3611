//go:build !windows

package main

import (
	"context"
	"errors"
	"fmt"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/config"
	"io"
	"net/http"
	"os"
	"os/signal"
	"syscall"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn/hcnsim"
)

// simulatorUsage is the simulator's line in the usage text.
const simulatorUsage = `  nri-hcn-portmap simulator --listen ADDR
                                       run the HNS simulator (for Linux tests and demos)
`

// simulatorCmd serves the HNS simulator, a test double that stands in for
// HNS on Linux; it is not built into the Windows binary.
func simulatorCmd(args []string, stderr io.Writer) error {
	fs := newFlagSet("simulator", stderr)
	listen := fs.String("listen", "", "address to serve on: unix:///path or tcp://127.0.0.1:port")
	if err := parseArgs(fs, args); err != nil {
		return err
	}
	if *listen == "" {
		return usagef(fs, "simulator: --listen is required: unix:///path or tcp://127.0.0.1:port")
	}
	l, err := hcnsim.Listen(*listen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: hcnsim.Handler(hcnsim.New()), ReadHeaderTimeout: config.AdminReadHeaderTimeout}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), config.AdminShutdownGrace)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	fmt.Fprintln(stderr, "hcn simulator listening on", *listen)
	if err := srv.Serve(l); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
