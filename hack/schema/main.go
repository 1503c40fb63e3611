// Command schema writes the plugin's configuration limits into the Helm
// chart's values.schema.json, and the schema's patterns into the template
// that checks them in words (package config/schema): make schema.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/config/schema"
)

func main() {
	path := flag.String("file", "deploy/helm/nri-hcn-portmap/values.schema.json", "the schema to write the limits into (the chart's templates beside it get its patterns)")
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
	checks, err := schema.Checks(out)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if err := write(path, out); err != nil {
		return err
	}
	return write(filepath.Join(filepath.Dir(path), schema.ChecksFile), checks)
}

// write writes b to path unless it holds b already.
func write(path string, b []byte) error {
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, b) {
		return nil
	}
	return os.WriteFile(path, b, 0o644)
}
