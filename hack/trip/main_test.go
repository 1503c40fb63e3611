package main

import (
	"strings"
	"testing"
)

// TestCountsRoomsAndReturnsOfATrace: a call into another file and back is
// a room and a return; a helper called twice from the same function
// returns twice; a deferred call, another goroutine and calls before
// Core.Started are not the trip; by step only steps move control.
func TestCountsRoomsAndReturnsOfATrace(t *testing.T) {
	m := "github.com/nri-hcn-portmap/nri-hcn-portmap/"
	trace := strings.Join([]string{
		"> goroutine(1): " + m + "plugin.decide(x)", // before the trip
		">> goroutine(1): " + m + "plugin.decide => ()",
		"> goroutine(1): " + m + "plugin.(*Core).Started(c, \"id\")",
		"> goroutine(1): " + m + "plugin.(*state).trigger(s)",
		">> goroutine(1): " + m + "plugin.(*state).trigger => ()", // delve: the return, its deferred call, the return again
		"> goroutine(1): " + m + "plugin.(*state).trigger.deferwrap1()",
		">> goroutine(1): " + m + "plugin.(*state).trigger.deferwrap1 => ()",
		">> goroutine(1): " + m + "plugin.(*state).trigger => ()",
		">> goroutine(1): " + m + "plugin.(*Core).Started => ()",
		"> goroutine(2): " + m + "plugin.(*Core).process(c, \"id\")",
		"> goroutine(3): " + m + "plugin.decide(y)", // another goroutine
		"> goroutine(2): " + m + "hcn.Keys(p)",
		">> goroutine(2): " + m + "hcn.Keys => (m)",
		"> goroutine(2): " + m + "hcn.Keys(p)",
		">> goroutine(2): " + m + "hcn.Keys => (m)",
		"> goroutine(2): " + m + "plugin.judge(e)",
		">> goroutine(2): " + m + "plugin.judge => (v)",
		">> goroutine(2): " + m + "plugin.(*Core).process => ()",
	}, "\n")
	files := map[string]string{
		"plugin.(*Core).Started": "plugin/triggers.go", "plugin.(*state).trigger": "plugin/state.go",
		"plugin.(*Core).process": "plugin/worker.go", "plugin.decide": "plugin/decide.go",
		"hcn.Keys": "hcn/types.go", "plugin.judge": "plugin/errors.go",
	}
	evs, err := readTrace(strings.NewReader(trace))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name           string
		visible        func(string) bool
		rooms, returns int
		seq            string
	}{
		{"function by function", func(string) bool { return true }, 5, 4,
			"plugin/triggers.go > plugin/state.go > <plugin/triggers.go > plugin/worker.go > hcn/types.go > <plugin/worker.go > hcn/types.go > <plugin/worker.go > plugin/errors.go > <plugin/worker.go"},
		{"by step", func(fn string) bool { return fn != "hcn.Keys" }, 4, 2,
			"plugin/triggers.go > plugin/state.go > <plugin/triggers.go > plugin/worker.go > plugin/errors.go > <plugin/worker.go"},
	} {
		seq, rooms, returns := count(walk(evs, files, tc.visible), func(f string) string { return f })
		if got := strings.Join(seq, " > "); rooms != tc.rooms || returns != tc.returns || got != tc.seq {
			t.Errorf("%s: %d rooms, %d returns, %s; want %d, %d, %s", tc.name, rooms, returns, got, tc.rooms, tc.returns, tc.seq)
		}
	}
}

func TestCanonicalNamesAFunctionAsItsDeclaration(t *testing.T) {
	for in, want := range map[string]string{
		"plugin.(*Core).startWorkers.func1":          "plugin.(*Core).startWorkers",
		"plugin.(*fact[go.shape.*uint8]).set":        "plugin.(*fact).set",
		"plugin/request.(*overlapIndex).add.func1.2": "plugin/request.(*overlapIndex).add",
	} {
		if got := canonical(in); got != want {
			t.Errorf("canonical(%q) = %q, want %q", in, got, want)
		}
	}
}
