package config

import (
	"strings"
	"testing"
	"time"
)

// Issue 39: each limit sits on a key of the configuration, the defaults
// keep every one, and Check holds a value to it at both its edges: the
// rules the chart's schema is written from are the ones validate keeps.
func TestALimitHoldsAtItsEdges(t *testing.T) {
	def := Default()
	for _, l := range Limits() {
		t.Run(l.Key, func(t *testing.T) {
			v := valueOf(&def, l.Key) // panics on a key that is none
			if list, ok := v.([]string); ok && len(list) > 0 {
				v = list[0]
			}
			if why, ok := l.Check(v, "windows"); !ok {
				t.Errorf("the default %v breaks it: %s", v, why)
			}
			in, out := edges(l)
			for _, v := range in {
				if why, ok := l.Check(v, "linux"); !ok {
					t.Errorf("%v refused: %s", v, why)
				}
			}
			for _, v := range out {
				if why, ok := l.Check(v, "linux"); ok || !strings.HasPrefix(why, "must be") {
					t.Errorf("%v taken (%q), want it refused saying the rule", v, why)
				}
			}
			for _, w := range l.NotOnWindows {
				if why, ok := l.Check(w, "windows"); ok || why != l.WindowsWhy {
					t.Errorf("%s on Windows: %v %q, want refused saying why", w, ok, why)
				}
			}
		})
	}
}

// edges are values just inside and just outside l.
func edges(l Limit) (in, out []any) {
	if l.Words != nil {
		for _, w := range l.Words {
			in = append(in, w)
		}
		return in, []any{"", "bogus", strings.ToUpper(l.Words[0]) + "x"}
	}
	lo, hi := l.Lo, l.Hi
	if l.LoOpen {
		out, lo = append(out, lo), lo+1
	} else {
		out = append(out, lo-1)
	}
	in = append(in, lo)
	if !l.NoMax {
		if l.HiOpen {
			out, hi = append(out, hi), hi-1
		} else {
			out = append(out, hi+1)
		}
		in = append(in, hi)
	}
	if l.IsDuration() {
		for i := range in {
			in[i] = Duration{time.Duration(in[i].(int64))}
		}
		for i := range out {
			out[i] = Duration{time.Duration(out[i].(int64))}
		}
		return in, out
	}
	for i := range in {
		in[i] = int(in[i].(int64))
	}
	for i := range out {
		out[i] = int(out[i].(int64))
	}
	return in, out
}
