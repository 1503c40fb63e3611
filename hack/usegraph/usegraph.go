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
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
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
	all, err := list(dir, ".")
	if err != nil {
		return nil, err
	}
	exports := map[string]string{}
	for _, p := range all {
		exports[p.ImportPath] = p.Export
	}
	self := all[len(all)-1]
	fset := token.NewFileSet()
	var files []*ast.File
	for _, name := range self.GoFiles {
		f, err := parser.ParseFile(fset, filepath.Join(self.Dir, name), nil, 0)
		if err != nil {
			return nil, err
		}
		files = append(files, f)
	}
	lookup := func(path string) (io.ReadCloser, error) {
		if e := exports[path]; e != "" {
			return os.Open(e)
		}
		return nil, fmt.Errorf("no export data for %s", path)
	}
	info := &types.Info{Uses: map[*ast.Ident]types.Object{}}
	conf := types.Config{Importer: importer.ForCompiler(fset, "gc", lookup)}
	pkg, err := conf.Check(self.ImportPath, fset, files, info)
	if err != nil {
		return nil, err
	}
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
