package schema

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/config"
)

// Check is one value's string rule as the chart's templates hold it
// (templates/_validate.tpl): the value at Path ("[]": each entry of a
// list) is refused unless it matches Pattern, in Words.
type Check struct {
	Path     []string `json:"path"`
	Pattern  string   `json:"pattern"`
	Words    string   `json:"words"`
	Key      string   `json:"key,omitempty"`      // the configuration key it sets
	Duration bool     `json:"duration,omitempty"` // a number is refused too
}

// ChecksFile is the template Checks writes: make schema writes it beside
// values.schema.json.
const ChecksFile = "templates/_patterns.tpl"

// Checks is the template that gives the chart's templates the schema's
// patterns (after Apply: kept under PatternKey), one Check per value that
// has one: a value whose schema is "anyOf" takes a string that matches any
// of its string alternatives (a pattern, or a const). Every checked value
// must have a description: the words a refusal says.
func Checks(doc []byte) ([]byte, error) {
	var root map[string]any
	if err := json.Unmarshal(doc, &root); err != nil {
		return nil, fmt.Errorf("schema: %w", err)
	}
	var checks []Check
	var errs []string
	var visit func(node map[string]any, path []string)
	visit = func(node map[string]any, path []string) {
		node, words := resolve(root, node)
		if props, ok := node["properties"].(map[string]any); ok {
			for _, k := range slices.Sorted(mapKeys(props)) {
				if child, ok := props[k].(map[string]any); ok {
					visit(child, append(slices.Clone(path), k))
				}
			}
		}
		if items, ok := node["items"].(map[string]any); ok {
			visit(items, append(slices.Clone(path), "[]"))
		}
		alts, free := stringRules(root, node)
		if free || alts == nil {
			return
		}
		c := Check{Path: path, Pattern: strings.Join(alts, "|"), Words: words}
		c.Key, _ = node[Marker].(string)
		c.Duration, _ = node[DurationKey].(bool)
		if c.Words == "" {
			for _, b := range branches(root, node) {
				if d, _ := b["description"].(string); d != "" {
					c.Words = d
					break
				}
			}
		}
		if c.Words == "" {
			errs = append(errs, fmt.Sprintf("%s: a value with a pattern needs a description, the words the chart refuses it in", strings.Join(path, ".")))
			return
		}
		if _, err := regexp.Compile(c.Pattern); err != nil {
			errs = append(errs, fmt.Sprintf("%s: %v", strings.Join(path, "."), err))
			return
		}
		checks = append(checks, c)
	}
	visit(root, nil)
	if errs != nil {
		return nil, fmt.Errorf("schema: %s", strings.Join(errs, "; "))
	}
	var list bytes.Buffer // a check a line
	list.WriteString("[\n")
	for i, c := range checks {
		var line bytes.Buffer
		enc := json.NewEncoder(&line)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(c); err != nil {
			return nil, fmt.Errorf("schema: %w", err)
		}
		list.Write(bytes.TrimSuffix(line.Bytes(), []byte("\n")))
		if i < len(checks)-1 {
			list.WriteByte(',')
		}
		list.WriteByte('\n')
	}
	list.WriteString("]\n")
	if bytes.Contains(list.Bytes(), []byte("{{")) || bytes.Contains(list.Bytes(), []byte("}}")) {
		return nil, fmt.Errorf("schema: a pattern or description holds {{ or }}, which the template would read as an action")
	}
	var out bytes.Buffer
	out.WriteString(`{{- /* Written by make schema (config/schema) from values.schema.json: each
value's pattern, which helm's schema check would refuse a value with by
printing the regular expression, and the words _validate.tpl refuses it in
instead. Do not edit; edit the schema and run make schema. */ -}}
{{- define "nri-hcn-portmap.patterns" -}}
`)
	out.Write(list.Bytes())
	out.WriteString("{{- end }}\n")
	// every key of the plugin's configuration (config.Keys), for the
	// chart's did-you-mean on config.settings (_validate.tpl)
	keys, err := json.Marshal(config.Keys())
	if err != nil {
		return nil, fmt.Errorf("schema: %w", err)
	}
	out.WriteString("{{- define \"nri-hcn-portmap.configKeys\" -}}\n")
	out.Write(keys)
	out.WriteString("\n{{- end }}\n")
	// the keys config.settings offers, by section (the schema's; the
	// chart cannot read values.schema.json, which .Files leaves out)
	offered := map[string][]string{}
	settings, _ := dig(root, "properties", "config", "properties", "settings", "properties").(map[string]any)
	for section, node := range settings {
		props, _ := dig(node, "properties").(map[string]any)
		offered[section] = slices.Sorted(mapKeys(props))
	}
	b, err := json.Marshal(offered)
	if err != nil {
		return nil, fmt.Errorf("schema: %w", err)
	}
	out.WriteString("{{- define \"nri-hcn-portmap.offeredSettings\" -}}\n")
	out.Write(b)
	out.WriteString("\n{{- end }}\n")
	return out.Bytes(), nil
}

// resolve follows node's $ref; words is the description of the first
// node on the way that has one.
func resolve(root, node map[string]any) (map[string]any, string) {
	words, _ := node["description"].(string)
	for range 8 {
		ref, ok := node["$ref"].(string)
		if !ok {
			break
		}
		name, ok := strings.CutPrefix(ref, "#/definitions/")
		defs, _ := root["definitions"].(map[string]any)
		target, _ := defs[name].(map[string]any)
		if !ok || target == nil {
			break
		}
		node = target
		if words == "" {
			words, _ = node["description"].(string)
		}
	}
	return node, words
}

// branches are node's anyOf alternatives, resolved; node alone without.
func branches(root, node map[string]any) []map[string]any {
	any_, ok := node["anyOf"].([]any)
	if !ok {
		return []map[string]any{node}
	}
	var out []map[string]any
	for _, b := range any_ {
		if m, ok := b.(map[string]any); ok {
			r, _ := resolve(root, m)
			out = append(out, r)
		}
	}
	return out
}

// stringRules are the anchored patterns a string value of node may match
// (nil: none says anything of strings); free when some alternative takes
// any string.
func stringRules(root, node map[string]any) (alts []string, free bool) {
	for _, b := range branches(root, node) {
		if c, ok := b["const"].(string); ok {
			alts = append(alts, "^"+regexp.QuoteMeta(c)+"$")
			continue
		}
		if p, ok := b[PatternKey].(string); ok {
			alts = append(alts, p)
			continue
		}
		if t, ok := b["type"].(string); ok && t != "string" {
			continue
		}
		if _, ok := b["enum"]; ok {
			continue // the schema says it, in words
		}
		if _, hasAnyOf := node["anyOf"]; hasAnyOf || b["type"] == "string" {
			return nil, true
		}
	}
	return alts, false
}

func mapKeys(m map[string]any) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// dig is v's value at path, through maps; nil where one is missing.
func dig(v any, path ...string) any {
	for _, k := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}
