// Command schema writes the plugin's configuration limits into the Helm
// chart's values.schema.json (package config/schema): make schema.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/config/schema"
)

func main() {
	path := flag.String("file", "deploy/helm/nri-hcn-portmap/values.schema.json", "the schema to write the limits into")
	flag.Parse()
	if err := run(*path); err != nil {
		fmt.Fprintln(os.Stderr, "schema:", err)
		os.Exit(1)
	}
}

func run(path string) error {
	in, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	out, err := schema.Apply(in)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if bytes.Equal(in, out) {
		return nil
	}
	return os.WriteFile(path, out, 0o644)
}
