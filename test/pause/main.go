// Command pause is the sandbox image's only process for the CRI end-to-end
// test (no registry is reachable here): it waits for SIGTERM or SIGINT.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGTERM, syscall.SIGINT)
	<-c
}
