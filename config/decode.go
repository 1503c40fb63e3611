package config

import (
	"bytes"
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"unicode"
	"unicode/utf16"

	"github.com/pelletier/go-toml/v2"
)

// What a configuration file read on Windows may hold besides TOML, and the
// fix for the mistakes Windows habits make in it, said with the error.

// asUTF8 is data as UTF-8 TOML: a UTF-8 byte order mark (what Windows
// editors and PowerShell's Out-File -Encoding utf8 write) dropped, and
// UTF-16 with its byte order mark (what PowerShell 5.1's > and Out-File
// write by default) converted. enc names the encoding read ("" for UTF-8).
func asUTF8(data []byte) (out []byte, enc string) {
	switch {
	case bytes.HasPrefix(data, []byte("\xef\xbb\xbf")):
		return data[3:], ""
	case bytes.HasPrefix(data, []byte("\xff\xfe")):
		return fromUTF16(data[2:], func(b []byte) uint16 { return uint16(b[0]) | uint16(b[1])<<8 }), "UTF-16LE"
	case bytes.HasPrefix(data, []byte("\xfe\xff")):
		return fromUTF16(data[2:], func(b []byte) uint16 { return uint16(b[1]) | uint16(b[0])<<8 }), "UTF-16BE"
	}
	return data, ""
}

// unmarkedUTF16 refuses a file with a NUL byte (once read as enc): TOML
// holds none, and one in two bytes NUL is UTF-16
// without its byte order mark (what Set-Content -Encoding Unicode writes
// on some systems, or a copy that dropped the mark). The encoding is not
// guessed: the error says to save the file as UTF-8.
func unmarkedUTF16(path string, data []byte, enc string) error {
	i := bytes.IndexByte(data, 0)
	if i < 0 {
		return nil
	}
	if enc != "" { // a file UTF-16 twice over: what it holds once decoded is UTF-16 again
		path += " (read as " + enc + ")"
	}
	line := bytes.Count(data[:i], []byte("\n")) + 1
	return &Error{Path: path, Msg: fmt.Sprintf("%s: line %d: a NUL byte: the file looks like UTF-16 without its byte order mark; "+
		"save it as UTF-8 (Set-Content -Encoding utf8, or Out-File -Encoding utf8)", path, line), Err: ErrInvalid}
}

func fromUTF16(b []byte, unit func([]byte) uint16) []byte {
	units := make([]uint16, 0, len(b)/2)
	for i := 0; i+1 < len(b); i += 2 {
		units = append(units, unit(b[i:i+2]))
	}
	return []byte(string(utf16.Decode(units)))
}

var (
	sectionRe = regexp.MustCompile(`^\s*\[\s*([A-Za-z0-9_.-]+)\s*\]`)
	keyRe     = regexp.MustCompile(`^\s*([A-Za-z0-9_-]+)\s*=\s*(.*?)\s*$`)
)

// keyOnLine is the key (section.key) written on line row of data, "" when
// the line writes none.
func keyOnLine(data []byte, row int) string {
	section := ""
	for i, line := range strings.Split(string(data), "\n") {
		if i+1 > row {
			break
		}
		if m := sectionRe.FindStringSubmatch(line); m != nil {
			section = m[1]
			continue
		}
		if i+1 == row {
			if m := keyRe.FindStringSubmatch(line); m != nil {
				return strings.Trim(section+"."+m[1], ".")
			}
		}
	}
	return ""
}

// syntaxFix is the fix for a syntax error on a line, in one sentence ("":
// none known).
func syntaxFix(line, msg string) string {
	m := keyRe.FindStringSubmatch(line)
	switch {
	case strings.Contains(msg, "escape"):
		return `a backslash in a "double-quoted" string starts an escape: write Windows paths in 'single quotes' ` +
			`(file = 'C:\ProgramData\nri-hcn-portmap\nri-hcn-portmap.log'), or double each backslash`
	case m != nil && m[2] != "" && !strings.ContainsAny(m[2][:1], "\"'[{+-0123456789") && m[2] != "true" && m[2] != "false":
		return fmt.Sprintf("a string needs quotes: %s = %q", m[1], strings.Trim(m[2], `"'`))
	case m != nil && m[2] != "" && strings.ContainsAny(m[2][:1], "0123456789") && strings.ContainsAny(m[2], "./:") && !strings.ContainsAny(m[2], `"'`):
		return fmt.Sprintf("an address or a range is a string, in quotes: %s = %q", m[1], m[2])
	}
	return ""
}

// durationsWritten checks the durations data writes before decoding: a
// number there (resync_interval = 60) is an error naming the key, the line
// and the fix, which the decoder would report without either.
func durationsWritten(path string, data []byte) error {
	var raw map[string]any
	if toml.Unmarshal(data, &raw) != nil {
		return nil // the decoder reports the syntax
	}
	lines := keyLines(data)
	ct := reflect.TypeOf(Config{})
	for i := range ct.NumField() {
		sec := ct.Field(i)
		section := strings.Split(sec.Tag.Get("toml"), ",")[0]
		values, _ := raw[section].(map[string]any)
		for j := range sec.Type.NumField() {
			f := sec.Type.Field(j)
			key := strings.Split(f.Tag.Get("toml"), ",")[0]
			v, ok := values[key]
			if !ok || f.Type != reflect.TypeOf(Duration{}) {
				continue
			}
			if _, isString := v.(string); !isString {
				return &Error{Path: path, Msg: fmt.Sprintf("%s:%d: %s.%s = %v: a duration is a string with its unit, e.g. %s = \"%vs\"",
					path, lines[section+"."+key], section, key, v, key, v), Err: ErrSyntax}
			}
		}
	}
	return nil
}

// said is what data writes for each key (section.key) given as a plain
// quoted string on its own line, read line by line: what a file that does
// not decode as a whole still says (reload and health then ask the plugin
// where the file says it answers).
func said(data []byte) map[string]string {
	data, _ = asUTF8(data)
	out := map[string]string{}
	section := ""
	for _, line := range strings.Split(string(data), "\n") {
		if m := sectionRe.FindStringSubmatch(line); m != nil {
			section = m[1]
			continue
		}
		m := keyRe.FindStringSubmatch(line)
		if m == nil || len(m[2]) < 2 {
			continue
		}
		v := m[2]
		if i := strings.Index(v, " #"); i >= 0 {
			v = strings.TrimSpace(v[:i])
		}
		if q := v[0]; (q == '"' || q == '\'') && v[len(v)-1] == q && !strings.Contains(v[1:len(v)-1], string(q)) &&
			(q == '\'' || !strings.Contains(v, "\\")) {
			out[section+"."+m[1]] = v[1 : len(v)-1]
		}
	}
	return out
}

// controlsWritten refuses a string the file writes (or an entry of a list
// of strings) that holds a control character: no key takes one, and one
// in a value is almost always a Windows path in "double quotes", where
// C:\temp\new.log is C:, a tab, "emp", a newline and "ew.log" to TOML. The
// error names the key, its line, the value as written, each character and
// the escape that made it, and the fix.
func controlsWritten(path string, data []byte) error {
	var set Config // what data writes, alone (the decoder reports the rest)
	if toml.Unmarshal(data, &set) != nil {
		return nil
	}
	lines := keyLines(data)
	var msgs []string
	for _, key := range Keys() {
		row, written := lines[key]
		if !written {
			continue
		}
		var values []string
		switch v := valueOf(&set, key).(type) {
		case string:
			values = []string{v}
		case []string:
			values = v
		}
		for _, v := range values {
			if made := controls(v); made != "" {
				msgs = append(msgs, fmt.Sprintf("%s:%d: %s = %s: holds %s: in \"double quotes\" a backslash starts an escape; "+
					"write a Windows path in 'single quotes' (%s = '%s'), or double each backslash",
					path, row, key, escaped(v), made, key, strings.NewReplacer("\t", `\t`, "\n", `\n`, "\r", `\r`, "\b", `\b`, "\f", `\f`).Replace(v)))
			}
		}
	}
	if msgs == nil {
		return nil
	}
	return &Error{Path: path, Msg: strings.Join(msgs, "; "), Err: ErrInvalid}
}

// controlNames names the control characters TOML's escapes make.
var controlNames = map[rune]string{'\t': `a tab (\t)`, '\n': `a newline (\n)`, '\r': `a carriage return (\r)`,
	'\b': `a backspace (\b)`, '\f': `a form feed (\f)`}

// controls names the control characters in s ("" when none), each once,
// in order.
func controls(s string) string {
	var names []string
	for _, r := range s {
		if !unicode.IsControl(r) {
			continue
		}
		name, ok := controlNames[r]
		if !ok {
			name = fmt.Sprintf("the control character U+%04X", r)
		}
		if !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	switch len(names) {
	case 0:
		return ""
	case 1:
		return names[0]
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}

// escaped is s as TOML's "double quotes" write it.
func escaped(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '\t':
			b.WriteString(`\t`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\b':
			b.WriteString(`\b`)
		case '\f':
			b.WriteString(`\f`)
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		default:
			if unicode.IsControl(r) {
				fmt.Fprintf(&b, `\u%04X`, r)
				continue
			}
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}
