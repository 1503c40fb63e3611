package config

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
)

// Keys are the configuration's keys, section.key, in the order Config
// declares them.
func Keys() []string {
	var out []string
	ct := reflect.TypeOf(Config{})
	for i := range ct.NumField() {
		sec := ct.Field(i)
		section := strings.Split(sec.Tag.Get("toml"), ",")[0]
		for j := range sec.Type.NumField() {
			out = append(out, section+"."+strings.Split(sec.Type.Field(j).Tag.Get("toml"), ",")[0])
		}
	}
	return out
}

// suggest is the help for an unknown key (its path as the decoder gives
// it: ["hcn", "netwrok"], or ["admision"] for a section): where a key of
// that name lives when it is in another section, else the closest known
// key or section by edit distance; "" when nothing is close.
func suggest(path []string) string {
	keys := Keys()
	var sections []string
	for _, k := range keys {
		if s, _, _ := strings.Cut(k, "."); !slices.Contains(sections, s) {
			sections = append(sections, s)
		}
	}
	if len(path) == 0 {
		return ""
	}
	if len(path) > 2 { // a table under a key's name: about the key
		path = path[:2]
	}
	name := path[len(path)-1]
	// a key of this name that exists, in another section (or written
	// before any section)
	var homes []string
	for _, k := range keys {
		if _, n, _ := strings.Cut(k, "."); n == name {
			homes = append(homes, k)
		}
	}
	if len(homes) > 0 && (len(path) == 1 || !slices.Contains(homes, strings.Join(path, "."))) {
		where := make([]string, len(homes))
		for i, h := range homes {
			s, _, _ := strings.Cut(h, ".")
			where[i] = "[" + s + "]"
		}
		return fmt.Sprintf("%s belongs in %s: %s", name, strings.Join(where, " or "), strings.Join(homes, ", "))
	}
	if len(path) == 1 {
		if s := closest(name, sections); s != nil {
			return "did you mean " + strings.Join(bracketed(s), " or ") + "?"
		}
		return "the sections are " + strings.Join(bracketed(sections), ", ")
	}
	// the section's own keys first: a typo of one of them
	var own []string
	for _, k := range keys {
		if strings.HasPrefix(k, path[0]+".") {
			own = append(own, k)
		}
	}
	if k := closest(strings.Join(path, "."), own); k != nil {
		return "did you mean " + strings.Join(k, " or ") + "?"
	}
	if k := closest(strings.Join(path, "."), keys); k != nil {
		return "did you mean " + strings.Join(k, " or ") + "?"
	}
	if !slices.Contains(sections, path[0]) {
		if s := closest(path[0], sections); s != nil {
			return "did you mean " + strings.Join(bracketed(s), " or ") + "?"
		}
	}
	return ""
}

func bracketed(s []string) []string {
	out := make([]string, len(s))
	for i, v := range s {
		out[i] = "[" + v + "]"
	}
	return out
}

// closest is the candidate nearest to s by edit distance, if it is near
// enough to be a typo of it (at most a third of its length, and at most
// 3); none otherwise. Candidates equally near are all named ("log.file or
// log.level"): a guess between them would be a coin's.
func closest(s string, candidates []string) []string {
	var best []string
	bestD := 0
	for _, c := range candidates {
		switch d := distance(s, c); {
		case len(best) == 0 || d < bestD:
			best, bestD = []string{c}, d
		case d == bestD:
			best = append(best, c)
		}
	}
	if len(best) == 0 || bestD > min(3, max(1, len(s)/3)) {
		return nil
	}
	slices.Sort(best)
	return best
}

// distance is the Damerau-Levenshtein distance of a and b (optimal string
// alignment: an adjacent swap counts one, as a typist makes it).
func distance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	d := make([][]int, len(ra)+1)
	for i := range d {
		d[i] = make([]int, len(rb)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(ra); i++ {
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(ra)][len(rb)]
}
