// Command hnsemu serves the HNS emulator for the Windows tests under wine.
package main

import (
	"flag"
	"fmt"
	"net"
	"os"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/test/hnsemu"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "TCP address (loopback)")
	flag.Parse()
	l, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintln(os.Stderr, "hnsemu:", err)
		os.Exit(1)
	}
	fmt.Println(l.Addr().String()) // the address, for the script that started us
	if err := hnsemu.New().Serve(l); err != nil {
		fmt.Fprintln(os.Stderr, "hnsemu:", err)
		os.Exit(1)
	}
}
