package usegraph

import (
	"slices"
	"strings"
	"testing"
)

// Issue 51: the controller's files point down: no file of plugin/'s top
// level uses a file that uses it back (the layout of docs/development.md,
// from the values at the bottom to the entry points at the top).
func TestThePluginsFilesPointDown(t *testing.T) {
	arrows, err := Arrows("../../plugin")
	if err != nil {
		t.Fatal(err)
	}
	if len(arrows) < 5 {
		t.Fatalf("arrows %v: the package was not read", arrows)
	}
	for _, loop := range Loops(arrows) {
		t.Errorf("a loop of uses: %s", Format(loop))
	}
}

// hcn is a leaf of the project: the HNS seam imports nothing of the
// plugin's, the configuration included (its own config struct carries
// what it needs).
func TestHCNImportsNothingOfTheProject(t *testing.T) {
	deps, err := Deps("../../hcn")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range deps {
		if strings.HasPrefix(d, "github.com/nri-hcn-portmap/nri-hcn-portmap/") {
			t.Errorf("hcn imports %s", d)
		}
	}
}

// The check finds a loop wherever there is one, and none where the arrows
// point one way.
func TestLoopsAreFound(t *testing.T) {
	for _, tc := range []struct {
		arrows map[string][]string
		loops  int
	}{
		{map[string][]string{"a": {"b"}, "b": {"c"}}, 0},
		{map[string][]string{"a": {"b", "c"}, "b": {"c"}}, 0},
		{map[string][]string{"a": {"b"}, "b": {"a"}}, 1},
		{map[string][]string{"a": {"b"}, "b": {"c"}, "c": {"a"}}, 1},
		{map[string][]string{"x": {"a"}, "a": {"b"}, "b": {"c"}, "c": {"b"}}, 1},
	} {
		if got := Loops(tc.arrows); len(got) != tc.loops {
			t.Errorf("Loops(%v) = %v, want %d", tc.arrows, got, tc.loops)
		}
	}
	if got := Loops(map[string][]string{"a": {"b"}, "b": {"a"}}); !slices.Equal(got[0], []string{"a", "b", "a"}) {
		t.Errorf("the loop reads %v", got[0])
	}
}
