// Package schema writes the plugin's configuration limits (config.Limits)
// into a JSON schema: the Helm chart's values.schema.json names, on each
// value that sets a configuration key, that key ("x-config-key"), and
// Apply gives the value its key's limit in JSON schema's words. The
// schema's rules are then the plugin's, not a copy of them (make schema
// writes the file; test/deploy fails where it differs from Apply's).
package schema

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/config"
)

// Marker is the keyword that names a value's configuration key.
const Marker = "x-config-key"

// PatternKey keeps a value's pattern in the schema where helm's validator
// does not read it: refused by a "pattern", helm prints the regular
// expression. The chart's templates check it instead (Checks), refusing
// the value in its description's words; Apply moves every "pattern" there.
// DurationKey marks a duration, which the templates also refuse when it
// is not a string (a number without its unit).
const (
	PatternKey  = "x-pattern"
	DurationKey = "x-duration"
)

// Go durations of any size, with their units (the spellings of a duration
// with no upper bound): above zero, and zero or above.
const (
	unit            = `(ns|us|µs|ms|s|m|h)`
	zeros           = `((0+(\.0*)?|\.0+)` + unit + `)`
	positive        = zeros + `*([0-9]*[1-9][0-9]*(\.[0-9]*)?|[0-9]*\.[0-9]*[1-9][0-9]*)` + unit + `(([0-9]+(\.[0-9]*)?|\.[0-9]+)` + unit + `)*`
	positivePattern = `^` + positive + `$`
	nonNegative     = `^(` + zeros + `+|` + positive + `)$`
)

// Apply is the schema doc with every marked value given its key's limit
// (the chart is for Windows nodes: words the plugin refuses there are
// left out), written as make schema writes it.
func Apply(doc []byte) ([]byte, error) {
	var root map[string]any
	if err := json.Unmarshal(doc, &root); err != nil {
		return nil, fmt.Errorf("schema: %w", err)
	}
	var errs []string
	walk(root, func(node map[string]any) {
		if p, ok := node["pattern"]; ok {
			node[PatternKey] = p
			delete(node, "pattern")
		}
		key, ok := node[Marker].(string)
		if !ok {
			return
		}
		l, ok := config.LimitOf(key)
		if !ok {
			errs = append(errs, fmt.Sprintf("%s %q: no limit of the plugin's configuration has that key", Marker, key))
			return
		}
		limit(node, l)
	})
	if errs != nil {
		return nil, fmt.Errorf("schema: %s", strings.Join(errs, "; "))
	}
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(root); err != nil {
		return nil, fmt.Errorf("schema: %w", err)
	}
	return out.Bytes(), nil
}

// Keys are the configuration keys doc marks, in the order found.
func Keys(doc []byte) ([]string, error) {
	var root map[string]any
	if err := json.Unmarshal(doc, &root); err != nil {
		return nil, fmt.Errorf("schema: %w", err)
	}
	var keys []string
	walk(root, func(node map[string]any) {
		if key, ok := node[Marker].(string); ok {
			keys = append(keys, key)
		}
	})
	slices.Sort(keys)
	return keys, nil
}

// walk calls fn on every object in v.
func walk(v any, fn func(map[string]any)) {
	switch v := v.(type) {
	case map[string]any:
		fn(v)
		for _, k := range slices.Sorted(func(yield func(string) bool) {
			for k := range v {
				if !yield(k) {
					return
				}
			}
		}) {
			walk(v[k], fn)
		}
	case []any:
		for _, e := range v {
			walk(e, fn)
		}
	}
}

// limit writes l into node, the schema of the value that sets l.Key.
func limit(node map[string]any, l config.Limit) {
	for _, k := range []string{"$ref", "anyOf", "enum", "minimum", "maximum", "pattern", PatternKey, DurationKey} {
		delete(node, k)
	}
	node["description"] = l.Rule()
	switch {
	case l.Words != nil:
		words := []any{}
		for _, w := range l.Words {
			if !slices.Contains(l.NotOnWindows, w) {
				words = append(words, w)
			}
		}
		if l.NotOnWindows != nil {
			node["description"] = fmt.Sprintf("on Windows, %s (not %s: %s)", config.Limit{Words: toStrings(words)}.Rule(),
				strings.Join(l.NotOnWindows, ", "), l.WindowsWhy)
		}
		if node["type"] == "array" {
			node["items"] = map[string]any{"enum": words}
			return
		}
		delete(node, "type")
		node["enum"] = words
	case l.IsDuration():
		// no type: a number is refused by the templates, in words
		delete(node, "type")
		node[DurationKey] = true
		node[PatternKey] = DurationPattern(l)
		if !l.NoMax {
			node["description"] = l.Rule() + ", as one whole number and its unit (h, m, s or ms), e.g. " + example(l)
		} else {
			node["description"] = l.Rule() + ", as a duration with its unit, e.g. 30s or 1m30s"
		}
	default:
		node["type"] = "integer"
		node["minimum"] = l.Lo
		if !l.NoMax {
			node["maximum"] = l.Hi
		}
	}
}

func toStrings(v []any) []string {
	out := make([]string, len(v))
	for i, e := range v {
		out[i] = e.(string)
	}
	return out
}

// units a bounded duration may be written in, largest first
var units = []struct {
	name string
	d    time.Duration
}{{"h", time.Hour}, {"m", time.Minute}, {"s", time.Second}, {"ms", time.Millisecond}}

// DurationPattern is the spellings of a duration l takes: any Go duration
// (above zero, or zero or above) where l has no upper bound; else one
// whole number and unit within l's range.
func DurationPattern(l config.Limit) string {
	switch {
	case l.NoMax && l.LoOpen && l.Lo == 0:
		return positivePattern
	case l.NoMax && l.Lo == 0:
		return nonNegative
	case l.NoMax:
		panic("schema: a duration at least " + config.Short(time.Duration(l.Lo)) + " has no pattern yet") // TestEveryLimitHasAPattern
	}
	lo, hi := l.Lo, l.Hi
	if l.LoOpen {
		lo++
	}
	if l.HiOpen {
		hi--
	}
	var alts []string
	for _, u := range units {
		n, m := (lo+int64(u.d)-1)/int64(u.d), hi/int64(u.d) // ceil, floor
		if n <= m {
			alts = append(alts, "("+Range(n, m)+")"+u.name)
		}
	}
	return "^(" + strings.Join(alts, "|") + ")$"
}

func example(l config.Limit) string {
	lo := l.Lo
	if l.LoOpen {
		lo++
	}
	for _, u := range units[2:] { // in s, else ms
		if n := (lo + int64(u.d) - 1) / int64(u.d); n*int64(u.d) <= l.Hi && (!l.HiOpen || n*int64(u.d) < l.Hi) {
			return strconv.FormatInt(max(n, 1), 10) + u.name
		}
	}
	return config.Short(time.Duration(l.Hi))
}

// Range is a regular expression for the whole numbers lo to hi (lo >= 0),
// written without leading zeros.
func Range(lo, hi int64) string {
	var alts []string
	// a length at a time: 0-9, 10-99, 100-999, ...
	for first, last := int64(0), int64(9); first <= hi; first, last = last+1, last*10+9 {
		if a, b := max(lo, first), min(hi, last); a <= b {
			alts = append(alts, sameLength(a, b)...)
		}
	}
	return strings.Join(alts, "|")
}

// sameLength is the alternatives for lo to hi, both of one length:
// aligned blocks of a fixed prefix, a digit range and free digits.
func sameLength(lo, hi int64) []string {
	var alts []string
	for lo <= hi {
		p, k := int64(1), 0
		// the largest aligned block from lo within hi that leaves the
		// first digit written
		top := int64(10)
		for top <= lo {
			top *= 10
		}
		for lo%(p*10) == 0 && lo+p*10-1 <= hi && p*10 < top {
			p, k = p*10, k+1
		}
		d := (lo / p) % 10
		c := min((hi-lo+1)/p, 10-d)
		var s string
		if prefix := lo / p / 10; prefix > 0 {
			s = strconv.FormatInt(prefix, 10)
		}
		if c == 1 {
			s += strconv.FormatInt(d, 10)
		} else {
			s += fmt.Sprintf("[%d-%d]", d, d+c-1)
		}
		if k > 0 {
			s += fmt.Sprintf("[0-9]{%d}", k)
		}
		alts = append(alts, s)
		lo += c * p
	}
	return alts
}
