// Command hnsemu serves the HNS emulator for the Windows tests under wine:
// HNS's calls from the stub DLLs on -listen and, with -sim-listen, the same
// HNS model over the simulator's wire API, so a Linux harness can create
// namespaces and read state where the Windows build under wine works.
package main

import (
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn/hcnsim"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/test/hnsemu"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "TCP address (loopback)")
	simListen := flag.String("sim-listen", "", "also serve the model over the simulator's wire API (unix:///path or tcp://127.0.0.1:port)")
	flag.Parse()
	l, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintln(os.Stderr, "hnsemu:", err)
		os.Exit(1)
	}
	emu := hnsemu.New()
	if *simListen != "" {
		sl, err := hcnsim.Listen(*simListen)
		if err != nil {
			fmt.Fprintln(os.Stderr, "hnsemu:", err)
			os.Exit(1)
		}
		go func() { _ = http.Serve(sl, hcnsim.Handler(emu.Model())) }()
	}
	fmt.Println(l.Addr().String()) // the address, for the script that started us
	if err := emu.Serve(l); err != nil {
		fmt.Fprintln(os.Stderr, "hnsemu:", err)
		os.Exit(1)
	}
}
