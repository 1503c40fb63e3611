package usegraph

import (
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/nri-hcn-portmap/nri-hcn-portmap/"

// source is a package and the packages it imports, listed with their
// export data: each of the module's is type-checked from its source on
// demand (check), its imports read from export data; funcs is every
// function of those loaded (load), by its key (funcKey).
type source struct {
	fset   *token.FileSet
	self   string // the import path of the package listed
	listed map[string]listed
	lookup func(string) (io.ReadCloser, error)
	funcs  map[string]*decl
	loaded map[string]bool
}

// decl is a function's declaration and the types of its package.
type decl struct {
	fd   *ast.FuncDecl
	info *types.Info
}

// newSource lists the package in dir and its imports.
func newSource(dir string) (*source, error) {
	all, err := list(dir, ".")
	if err != nil {
		return nil, err
	}
	s := &source{fset: token.NewFileSet(), self: all[len(all)-1].ImportPath, listed: map[string]listed{}, funcs: map[string]*decl{}, loaded: map[string]bool{}}
	exports := map[string]string{}
	for _, p := range all {
		s.listed[p.ImportPath], exports[p.ImportPath] = p, p.Export
	}
	s.lookup = func(path string) (io.ReadCloser, error) {
		if e := exports[path]; e != "" {
			return os.Open(e)
		}
		return nil, fmt.Errorf("no export data for %s", path)
	}
	return s, nil
}

// check type-checks the package path from its source.
func (s *source) check(path string) (*types.Info, *types.Package, error) {
	p, ok := s.listed[path]
	if !ok {
		return nil, nil, fmt.Errorf("%s is not among the packages listed", path)
	}
	var files []*ast.File
	for _, name := range p.GoFiles {
		f, err := parser.ParseFile(s.fset, filepath.Join(p.Dir, name), nil, 0)
		if err != nil {
			return nil, nil, err
		}
		files = append(files, f)
	}
	info := &types.Info{Uses: map[*ast.Ident]types.Object{}, Defs: map[*ast.Ident]types.Object{}}
	conf := types.Config{Importer: importer.ForCompiler(s.fset, "gc", s.lookup)}
	pkg, err := conf.Check(path, s.fset, files, info)
	if err != nil {
		return nil, nil, err
	}
	for _, f := range files {
		for _, d := range f.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok && fd.Body != nil {
				s.funcs[funcKey(info.Defs[fd.Name].(*types.Func))] = &decl{fd: fd, info: info}
			}
		}
	}
	return info, pkg, nil
}

// load checks the package path once.
func (s *source) load(path string) error {
	if s.loaded[path] {
		return nil
	}
	s.loaded[path] = true
	_, _, err := s.check(path)
	return err
}

// funcKey names a function across type-checks: package.Recv.Name.
func funcKey(fn *types.Func) string {
	fn = fn.Origin()
	name := fn.Pkg().Path() + "."
	if recv := fn.Signature().Recv(); recv != nil {
		t := recv.Type()
		if p, ok := t.(*types.Pointer); ok {
			t = p.Elem()
		}
		if n, ok := t.(*types.Named); ok {
			name += n.Origin().Obj().Name() + "."
		}
	}
	return name + fn.Name()
}

// callee is a function of the module a body uses, or a method it calls
// through an interface (dynamic: a call a live object may answer).
type callee struct {
	key     string
	dynamic bool
}

// Reach is every function of the module that start (pkg.Name) calls,
// directly or not, start included, each with the faults a function of
// values must not have: longer than maxLines, a value of type core or of
// an interface type but valueInterfaces anywhere in it, a call through
// one.
func Reach(dir, start, core string, maxLines int) (reached []string, faults []string, err error) {
	s, err := newSource(dir)
	if err != nil {
		return nil, nil, err
	}
	queue, seen := []string{start}, map[string]bool{start: true}
	for len(queue) > 0 {
		key := queue[0]
		queue = queue[1:]
		if err := s.load(pkgOf(key)); err != nil {
			return nil, nil, err
		}
		d, ok := s.funcs[key]
		if !ok {
			return nil, nil, fmt.Errorf("%s: no declaration found", key)
		}
		reached = append(reached, key)
		start, end := s.fset.Position(d.fd.Pos()), s.fset.Position(d.fd.End())
		if n := end.Line - start.Line + 1; n > maxLines {
			faults = append(faults, fmt.Sprintf("%s (%s:%d) is %d lines long", key, filepath.Base(start.Filename), start.Line, n))
		}
		for _, c := range uses(d, core, &faults, key) {
			switch {
			case c.dynamic:
				faults = append(faults, fmt.Sprintf("%s calls %s through an interface", key, c.key))
			case !seen[c.key]:
				seen[c.key] = true
				queue = append(queue, c.key)
			}
		}
	}
	slices.Sort(reached)
	return reached, faults, nil
}

// pkgOf is key's package path.
func pkgOf(key string) string {
	i := strings.LastIndex(key, "/")
	return key[:i+strings.Index(key[i:], ".")]
}

// uses is the module's functions d's declaration refers to, and the
// calls it makes through an interface (any but valueInterfaces); a fault
// for every value in it of type core or of another interface type (a
// value a live object could be).
func uses(d *decl, core string, faults *[]string, key string) []callee {
	var out []callee
	ast.Inspect(d.fd, func(n ast.Node) bool {
		id, ok := n.(*ast.Ident)
		if !ok {
			return true
		}
		obj := d.info.Uses[id]
		if obj == nil {
			obj = d.info.Defs[id]
		}
		switch o := obj.(type) {
		case *types.Var:
			if t := o.Type(); t.String() == core || (types.IsInterface(t) && !isValue(t)) {
				*faults = append(*faults, fmt.Sprintf("%s holds a %s (%s)", key, t, id.Name))
			}
		case *types.Func:
			if recv := o.Signature().Recv(); recv != nil && types.IsInterface(recv.Type()) && !isValue(recv.Type()) {
				out = append(out, callee{key: o.FullName(), dynamic: true})
				return true
			}
			if o.Pkg() == nil || !strings.HasPrefix(o.Pkg().Path(), module) || d.info.Defs[id] != nil {
				return true
			}
			out = append(out, callee{key: funcKey(o)})
		}
		return true
	})
	return out
}

// Issue 51: decide and everything it calls are functions of values: no
// *Core, no value or call a live object could answer (an interface but
// valueInterfaces, whoever declares it), no function longer than 40 lines.
func TestDecideIsAFunctionOfValues(t *testing.T) {
	reached, faults, err := Reach("../../plugin", module+"plugin.decide", "*"+module+"plugin.Core", 40)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{module + "hcn.Diff", module + "plugin/admission.Policy.AdmitRequest", module + "plugin.build"} {
		if !slices.Contains(reached, want) {
			t.Fatalf("%s not among what decide calls (%d functions): the calls were not followed", want, len(reached))
		}
	}
	for _, f := range faults {
		t.Error(f)
	}
	t.Logf("decide calls %d functions of the module", len(reached))
}

// valueInterfaces are the interfaces decide's closure may hold and call:
// error, and a compiled label selector (k8s.io/apimachinery's labels,
// built from the policy and the NetworkPolicies, answering from its own
// fields). Any other could be a live object.
var valueInterfaces = []string{"error", "k8s.io/apimachinery/pkg/labels.Selector"}

// isValue: t is one of valueInterfaces.
func isValue(t types.Type) bool { return slices.Contains(valueInterfaces, t.String()) }
