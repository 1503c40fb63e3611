// Command trip counts the trip of one start through the controller from a
// trace of its calls (make trip: delve's `dlv trace` of
// TestOneStartIsMappedAndReportedOnce in plugin/), so that the figures in
// docs/development.md are measured, not counted by hand.
//
// It reads the trace on standard input, keeps the calls made on the
// goroutine of Core.Started (up to its return) and then on the worker's
// (Core.process, up to its return), names each function's file by parsing
// the module's sources, and prints the files in the order control reaches
// them and two counts, each of rooms (distinct places) and returns (control
// coming back into a place it left for a callee):
//
//   - function by function: every file is a place;
//   - by step: a package below plugin/ is one place, as is a file of plugin/
//     or hcn/ that holds a step; a file of shared values or helpers (the
//     helpers list) is folded into its caller.
//
// The test's stand-ins are named as what they stand for: memStore is
// containerd's store, hostTable the node's sockets, reports the API
// server's reporter (where the trip ends). The HNS simulator is HNS: not
// ours, not counted.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

const module = "github.com/nri-hcn-portmap/nri-hcn-portmap/"

// standIns are the test's stand-ins, by receiver, and the file they stand for.
var standIns = map[string]string{
	"plugin.(*memStore)":  "plugin/containerd/store.go",
	"plugin.(*hostTable)": "plugin/hostsockets/sockets.go",
	"plugin.(*reports)":   "plugin/kube/report.go",
}

// steps are the functions that are steps of a start, by step: a call of
// any other function is folded into its caller's room.
var steps = []string{
	"plugin.(*Core).Started", "plugin.(*Core).enqueue", "plugin.(*state).trigger",
	"plugin.(*Core).process", "plugin.(*state).snapshot", "plugin.(*Core).sync", "plugin.decide",
	"plugin.(*memStore).Sandbox", "plugin/request.Resolve", "plugin/admission.(*Policy).AdmitRequest",
	"plugin/admission.(*Policy).AdmitNetwork", "plugin.(*hostTable).On", "hcn.(*Manager).Target",
	"hcn.(*Manager).Lookup", "hcn.Diff", "plugin.(*state).claim", "hcn.(*Manager).Apply",
	"plugin.judge", "plugin.(*state).commit", "plugin.ownersReport", "plugin.(*reports).Report",
}

func main() {
	root := flag.String("root", ".", "the module's root")
	verbose := flag.Bool("v", false, "print every call")
	flag.Parse()
	files, err := fileOfFuncs(*root)
	if err != nil {
		fmt.Fprintln(os.Stderr, "trip:", err)
		os.Exit(1)
	}
	evs, err := readTrace(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "trip:", err)
		os.Exit(1)
	}
	for _, by := range []struct {
		name    string
		visible func(string) bool
		room    func(string) string
	}{
		{"function by function", func(string) bool { return true }, func(f string) string { return f }},
		{"by step", func(fn string) bool { return slices.Contains(steps, fn) }, stepRoom},
	} {
		path := walk(evs, files, by.visible)
		if len(path) == 0 {
			fmt.Fprintln(os.Stderr, "trip: no Core.Started then Core.process in the trace")
			os.Exit(1)
		}
		if *verbose {
			for _, s := range path {
				fmt.Printf("%s%s %s (%s)\n", strings.Repeat("  ", s.depth), s.kind, s.fn, s.file)
			}
		}
		seq, rooms, returns := count(path, by.room)
		fmt.Printf("%s: %d rooms, %d returns\n  %s\n", by.name, rooms, returns, strings.Join(seq, " > "))
	}
}

// event is one line of the trace: a call or a return.
type event struct {
	g    string
	fn   string
	call bool
}

var line = regexp.MustCompile(`^(>>?) goroutine\((\d+)\): ((?:[^ (]|\(\*[^)]*\))+)(\(| =>)`)

func readTrace(r io.Reader) ([]event, error) {
	var evs []event
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		m := line.FindStringSubmatch(sc.Text())
		if m == nil || !strings.HasPrefix(m[3], module) {
			continue
		}
		evs = append(evs, event{g: m[2], fn: strings.TrimPrefix(m[3], module), call: m[1] == ">"})
	}
	return evs, sc.Err()
}

// step is one move of control: into a function (call) or back (return).
type step struct {
	kind  string
	fn    string
	file  string
	depth int
}

// walk follows the goroutine of the first Core.Started to its return,
// then the worker's first Core.process after it to its return, and gives
// every move between visible functions of ours whose file is known: a
// call of one, and control coming back into the nearest visible caller.
func walk(evs []event, files map[string]string, visible func(string) bool) []step {
	var out []step
	for _, seg := range []string{"plugin.(*Core).Started", "plugin.(*Core).process"} {
		i := slices.IndexFunc(evs, func(e event) bool { return e.call && e.fn == seg })
		if i < 0 {
			return nil
		}
		g := evs[i].g
		var stack []string
		for _, e := range evs[i:] {
			if e.g != g || strings.Contains(e.fn, ".deferwrap") { // deferred calls run as their function returns
				continue
			}
			fn := canonical(e.fn)
			file, ok := fileOf(fn, files)
			ok = ok && visible(fn)
			if e.call {
				stack = append(stack, fn)
				if ok {
					out = append(out, step{kind: "call", fn: fn, file: file, depth: len(stack)})
				}
				continue
			}
			at := slices.Index(stack, fn)
			if at < 0 { // a second report of a return (deferred calls)
				continue
			}
			stack = stack[:at]
			for j := len(stack) - 1; j >= 0; j-- { // back into the nearest caller of ours
				if f, ok := fileOf(stack[j], files); ok && visible(stack[j]) {
					out = append(out, step{kind: "back", fn: stack[j], file: f, depth: j + 1})
					break
				}
			}
			if len(stack) == 0 {
				break
			}
		}
		evs = evs[i+1:]
	}
	return out
}

// count says which rooms control visits, in order, and how often it comes
// back into one it left for a callee.
func count(path []step, room func(string) string) (seq []string, rooms, returns int) {
	seen := map[string]bool{}
	cur := ""
	for _, s := range path {
		r := room(s.file)
		if r == cur {
			continue
		}
		if s.kind == "back" {
			returns++
			seq = append(seq, "<"+r)
		} else {
			seq = append(seq, r)
		}
		if !seen[r] {
			seen[r] = true
			rooms++
		}
		cur = r
	}
	return seq, rooms, returns
}

// stepRoom is a file's room by step: a package below plugin/ as a whole,
// else the file.
func stepRoom(file string) string {
	if dir := filepath.Dir(file); strings.HasPrefix(dir, "plugin/") {
		return dir + "/"
	}
	return file
}

// canonical names a function as its declaration does: closures and
// deferred or started wrappers are their enclosing function's, a generic
// receiver's shape is dropped.
var (
	wrapper = regexp.MustCompile(`(\.(func|deferwrap|gowrap)\d+(\.\d+)*)+$`)
	shape   = regexp.MustCompile(`\[[^\]]*\]`)
)

func canonical(fn string) string {
	fn = wrapper.ReplaceAllString(fn, "")
	for strings.Contains(fn, "[") {
		fn = shape.ReplaceAllString(fn, "")
	}
	return fn
}

func fileOf(fn string, files map[string]string) (string, bool) {
	for recv, file := range standIns {
		if strings.HasPrefix(fn, recv+".") {
			return file, true
		}
	}
	f, ok := files[fn]
	return f, ok
}

// fileOfFuncs names the file of every function and method of the module's
// sources (no tests, nothing under test/ or hcn/hcnsim/), keyed as delve
// names them: pkg.F, pkg.(*T).M, pkg.T.M.
func fileOfFuncs(root string) (map[string]string, error) {
	out := map[string]string{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if d.IsDir() {
			if rel == "test" || rel == "hcn/hcnsim" || rel == "hack" || strings.HasPrefix(d.Name(), ".") && rel != "." {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		pkg := filepath.Dir(rel)
		for _, decl := range f.Decls {
			fd, ok := decl.(*ast.FuncDecl)
			if !ok {
				continue
			}
			out[pkg+"."+recvOf(fd)+fd.Name.Name] = filepath.ToSlash(rel)
		}
		return nil
	})
	return out, err
}

func recvOf(fd *ast.FuncDecl) string {
	if fd.Recv == nil || len(fd.Recv.List) == 0 {
		return ""
	}
	t := fd.Recv.List[0].Type
	star := false
	if s, ok := t.(*ast.StarExpr); ok {
		star, t = true, s.X
	}
	switch x := t.(type) {
	case *ast.IndexExpr:
		t = x.X
	case *ast.IndexListExpr:
		t = x.X
	}
	name := t.(*ast.Ident).Name
	if star {
		return "(*" + name + ")."
	}
	return name + "."
}
