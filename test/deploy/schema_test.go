package deploy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

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
	checks, err := schema.Checks(written)
	if err != nil {
		t.Fatal(err)
	}
	if tpl, err := os.ReadFile(filepath.Join(chart, schema.ChecksFile)); err != nil || !bytes.Equal(tpl, checks) {
		t.Errorf("%s is not what config/schema writes from values.schema.json (%v): run `make schema`", schema.ChecksFile, err)
	}
	if bytes.Contains(written, []byte(`"pattern"`)) {
		t.Errorf("%s has a \"pattern\": helm would refuse a value by printing it", file)
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

// Issue 48: a value refused for its form is refused in words: for every
// value the schema gives a pattern (kept where helm's validator does not
// print it, checked by the templates), a value of no form is refused by
// helm template naming the value and saying what is allowed, never
// printing the regular expression; a duration written as a number is
// refused saying it needs its unit.
func TestAValueOfTheWrongFormIsRefusedInWords(t *testing.T) {
	var checks []schema.Check
	tpl, err := os.ReadFile(filepath.Join(chart, schema.ChecksFile))
	if err != nil {
		t.Fatal(err)
	}
	body := tpl[bytes.Index(tpl, []byte("\n["))+1 : bytes.Index(tpl, []byte("\n]\n"))+2] // the patterns' define
	if err := json.Unmarshal(body, &checks); err != nil {
		t.Fatalf("%s: %v", schema.ChecksFile, err)
	}
	if len(checks) < 10 {
		t.Fatalf("%d checks: the schema's patterns are not all there", len(checks))
	}
	dir := t.TempDir()
	for i, c := range checks {
		name := strings.ReplaceAll(strings.Join(c.Path, "."), ".[]", "")
		bad := []any{" x*"} // no pattern takes a leading space and a star
		if c.Duration {
			bad = append(bad, 60)
		}
		for j, v := range bad {
			t.Run(fmt.Sprintf("%s=%v", name, v), func(t *testing.T) {
				t.Parallel()
				tree := map[string]any{}
				node := tree
				for k, p := range c.Path {
					last := k == len(c.Path)-1 || c.Path[k+1] == "[]"
					if !last {
						node[p] = map[string]any{}
						node = node[p].(map[string]any)
						continue
					}
					if k+1 < len(c.Path) {
						node[p] = []any{v}
					} else {
						node[p] = v
					}
					break
				}
				values, err := yaml.Marshal(tree)
				if err != nil {
					t.Fatal(err)
				}
				file := filepath.Join(dir, fmt.Sprintf("v-%d-%d.yaml", i, j))
				if err := os.WriteFile(file, values, 0o600); err != nil {
					t.Fatal(err)
				}
				out, err := renderErr(t, "nri-hcn-portmap", "--values-file="+file)
				want := c.Words
				if _, isNumber := v.(int); isNumber {
					want = "a duration is a string with its unit"
				}
				if err == nil || !strings.Contains(out, name) || !strings.Contains(out, want) {
					t.Fatalf("helm template: %v, want refused naming %s and saying %q:\n%s", err, name, want, out)
				}
				if strings.Contains(out, "pattern") || strings.Contains(out, "want string") {
					t.Errorf("the refusal speaks the schema's language:\n%s", out)
				}
			})
		}
	}
}
