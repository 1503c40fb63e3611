// Package usegraph says which file of a Go package uses which: file A uses
// file B when A refers to something declared in B (a package-level name,
// a method, a field). The layout's rule (docs/development.md) is read off
// it: no file of a package uses a file that uses it back, directly or
// around a longer loop.
package usegraph

import (
	"bytes"
	"encoding/json"
	"fmt"
	"go/types"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// listed is what `go list -json` says of a package.
type listed struct {
	Dir        string
	ImportPath string
	Export     string
	GoFiles    []string
	Deps       []string
}

// list runs go list -export -deps -json on pattern.
func list(dir, pattern string) ([]listed, error) {
	cmd := exec.Command("go", "list", "-export", "-deps", "-json", pattern)
	cmd.Dir = dir
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("go list %s: %w: %s", pattern, err, errb.String())
	}
	var all []listed
	dec := json.NewDecoder(&out)
	for dec.More() {
		var p listed
		if err := dec.Decode(&p); err != nil {
			return nil, err
		}
		all = append(all, p)
	}
	return all, nil
}

// Deps lists the packages the package in dir imports, directly or not.
func Deps(dir string) ([]string, error) {
	all, err := list(dir, ".")
	if err != nil {
		return nil, err
	}
	return all[len(all)-1].Deps, nil
}

// Arrows returns, for the package in dir (its files without tests), every
// file's uses of the other files, by base name, each sorted.
func Arrows(dir string) (map[string][]string, error) {
	src, err := newSource(dir)
	if err != nil {
		return nil, err
	}
	info, pkg, err := src.check(src.self)
	if err != nil {
		return nil, err
	}
	fset := src.fset
	arrows := map[string][]string{}
	for id, obj := range info.Uses {
		if obj.Pkg() != pkg || !declaredInFile(obj, pkg) {
			continue
		}
		from, to := filepath.Base(fset.File(id.Pos()).Name()), filepath.Base(fset.File(obj.Pos()).Name())
		if from != to && !slices.Contains(arrows[from], to) {
			arrows[from] = append(arrows[from], to)
		}
	}
	for _, to := range arrows {
		slices.Sort(to)
	}
	return arrows, nil
}

// declaredInFile: obj is a package-level name, a method or a field (what
// one file of a package gives another), not a local name.
func declaredInFile(obj types.Object, pkg *types.Package) bool {
	switch o := obj.(type) {
	case *types.Func:
		return o.Parent() == pkg.Scope() || o.Signature().Recv() != nil
	case *types.Var:
		return o.IsField() || o.Parent() == pkg.Scope()
	}
	return obj.Parent() == pkg.Scope()
}

// Loops returns every loop of arrows (a file that uses a file that uses
// it back, directly or around more files), each as the files around it.
func Loops(arrows map[string][]string) [][]string {
	var loops [][]string
	seen := map[string]bool{}
	var path []string
	onPath := map[string]int{}
	var walk func(f string)
	walk = func(f string) {
		if i, ok := onPath[f]; ok {
			loops = append(loops, append(slices.Clone(path[i:]), f))
			return
		}
		if seen[f] {
			return
		}
		seen[f] = true
		onPath[f] = len(path)
		path = append(path, f)
		for _, to := range arrows[f] {
			walk(to)
		}
		path = path[:len(path)-1]
		delete(onPath, f)
	}
	var froms []string
	for f := range arrows {
		froms = append(froms, f)
	}
	slices.Sort(froms)
	for _, f := range froms {
		walk(f)
	}
	return loops
}

// Format is a loop as operators read it: a.go -> b.go -> a.go.
func Format(loop []string) string { return strings.Join(loop, " -> ") }

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
