// Command nopplugin is a do-nothing NRI plugin: the baseline the plugin's
// RunPodSandbox cost is compared against.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
)

type nop struct{}

var (
	_ stub.RunPodInterface  = nop{}
	_ stub.StopPodInterface = nop{}
)

func (nop) RunPodSandbox(context.Context, *api.PodSandbox) error  { return nil }
func (nop) StopPodSandbox(context.Context, *api.PodSandbox) error { return nil }

func main() {
	socket := flag.String("nri-socket", api.DefaultSocketPath, "NRI socket")
	flag.Parse()
	st, err := stub.New(nop{}, stub.WithPluginName("nop"), stub.WithPluginIdx("10"), stub.WithSocketPath(*socket))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := st.Run(ctx); err != nil && ctx.Err() == nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
