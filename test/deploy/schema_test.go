package deploy

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/config"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/config/schema"
)

// Issue 39: the chart's schema holds each value to its configuration key's
// limit as the plugin's validation does, written from one source
// (config.Limits, by make schema): the file is what config/schema writes,
// and every limit of a key the chart lets an operator set is on the value
// that sets it.
func TestTheSchemaIsWrittenFromThePluginsLimits(t *testing.T) {
	file := filepath.Join(chart, "values.schema.json")
	doc, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	written, err := schema.Apply(doc)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(doc, written) {
		t.Errorf("%s is not what config/schema writes from the plugin's limits: run `make schema`", file)
	}
	marked, err := schema.Keys(doc)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range config.Limits() {
		owned := chartOwned[l.Key]
		settable := owned == "" || strings.HasPrefix(owned, "config.")
		if settable && !slices.Contains(marked, l.Key) {
			t.Errorf("%s: the chart sets it (%s), its schema does not mark the value %s", l.Key, valuePath(l.Key), schema.Marker)
		}
		if !settable && slices.Contains(marked, l.Key) {
			t.Errorf("%s: the chart owns it (%s), its schema marks a value for it", l.Key, owned)
		}
	}
}
