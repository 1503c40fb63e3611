package config

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"unicode/utf16"
)

func utf16With(bom []byte, s string, bigEndian bool) []byte {
	out := append([]byte{}, bom...)
	for _, u := range utf16.Encode([]rune(s)) {
		if bigEndian {
			out = append(out, byte(u>>8), byte(u))
		} else {
			out = append(out, byte(u), byte(u>>8))
		}
	}
	return out
}

// Issue 39: a file written the Windows way is read (UTF-16 with its byte
// order mark, as PowerShell 5.1's > writes it; UTF-8 with one), and each
// mistake Windows habits make is an error naming the file, the line, the
// key (section.key) and the fix in one sentence.
func TestConfigErrorsNameFileLineKeyAndTheFix(t *testing.T) {
	const file = `C:\ProgramData\nri-hcn-portmap\config.toml`
	text := "[hcn]\nnetwork = \"pods\"\n\n[log]\nfile = 'C:\\ProgramData\\nri-hcn-portmap\\x.log'\n"
	want := Default()
	want.HCN.Network, want.Log.File = "pods", `C:\ProgramData\nri-hcn-portmap\x.log`
	for name, data := range map[string][]byte{
		"UTF-8":               []byte(text),
		"UTF-8 with a BOM":    append([]byte("\xef\xbb\xbf"), text...),
		"UTF-16LE with a BOM": utf16With([]byte{0xff, 0xfe}, text, false),
		"UTF-16BE with a BOM": utf16With([]byte{0xfe, 0xff}, text, true),
	} {
		got := Default()
		if err := Decode(file, data, &got); err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("%s: %v, %+v", name, err, got.HCN)
		}
	}
	for _, tc := range []struct {
		name, data string
		want       []string // in the message, beside the file
	}{
		{"a backslash in double quotes", "[log]\nfile = \"C:\\ProgramData\\x.log\"\n",
			[]string{file + ":2: log.file:", "invalid escape", "write Windows paths in 'single quotes'"}},
		{"a bare word", "[hcn]\nnetwork = nat\n", []string{file + ":2: hcn.network:", `a string needs quotes: network = "nat"`}},
		{"a bare range", "[hcn]\n\nsubnet = 172.30.0.0/16\n", []string{file + ":3: hcn.subnet:", `in quotes: subnet = "172.30.0.0/16"`}},
		{"a type mismatch", "[plugin]\nmax_mappings_per_pod = 1\n[hcn]\nroute_metric = \"x\"\n",
			[]string{file + `:4: hcn.route_metric = "x": a TOML string where a whole number is expected`}},
		{"a duration without its unit", "[plugin]\n# every minute\nresync_interval = 60\n",
			[]string{file + ":3: plugin.resync_interval = 60:", `e.g. resync_interval = "60s"`}},
		{"a duration that is none", "[plugin]\nresync_interval = \"soon\"\n", []string{file + ":2: plugin.resync_interval:", `"soon" is not a duration`}},
		{"an unknown key", "[hcn]\nnetwrok = \"nat\"\n", []string{file + `:2: unknown key "hcn.netwrok"`}},
		// issue 55: UTF-16 without its byte order mark: the encoding named
		{"UTF-16LE without a byte order mark", string(utf16With(nil, "[hcn]\nnetwork = \"pods\"\n", false)),
			[]string{file, "line 1: a NUL byte: the file looks like UTF-16 without its byte order mark; save it as UTF-8"}},
		// issue 48: valid TOML, but not the path written
		{"escapes TOML takes in a path", "[log]\nlevel = \"info\"\nfile = \"C:\\temp\\new.log\"\n",
			[]string{file + `:3: log.file = "C:\temp\new.log": holds a tab (\t) and a newline (\n)`,
				`write a Windows path in 'single quotes' (log.file = 'C:\temp\new.log'), or double each backslash`}},
		{"a backspace and a form feed", "[admin]\nkey_file = \"C:\\bin\\files\"\n",
			[]string{file + `:2: admin.key_file = "C:\bin\files": holds a backspace (\b) and a form feed (\f)`}},
		{"a control character in a list", "[admission]\nnamespaces = [\"a\", \"b\\u0007\"]\n",
			[]string{file + `:2: admission.namespaces = "b\u0007": holds the control character U+0007`}},
	} {
		// issue 48: the same error, line included, whatever the file's
		// encoding
		for enc, data := range map[string][]byte{
			"UTF-8":               []byte(tc.data),
			"UTF-8 with a BOM":    append([]byte("\xef\xbb\xbf"), tc.data...),
			"UTF-16LE with a BOM": utf16With([]byte{0xff, 0xfe}, tc.data, false),
			"UTF-16BE with a BOM": utf16With([]byte{0xfe, 0xff}, tc.data, true),
		} {
			t.Run(tc.name+"/"+enc, func(t *testing.T) {
				cfg := Default()
				err := Decode(file, data, &cfg)
				var e *Error
				if !errors.As(err, &e) || (!errors.Is(err, ErrSyntax) && !errors.Is(err, ErrUnknownKey) && !errors.Is(err, ErrInvalid)) {
					t.Fatalf("Decode = %v, want a configuration *Error", err)
				}
				for _, w := range tc.want {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("%v\nwant it to say %q", err, w)
					}
				}
				if !reflect.DeepEqual(cfg, Default()) && tc.name != "a type mismatch" {
					t.Errorf("a refused file changed the configuration: %+v", cfg)
				}
			})
		}
	}
}

// A file that starts with a UTF-8 byte order mark (Notepad, PowerShell's
// Out-File -Encoding utf8) decodes as the same file without it.
func TestDecodeTakesAByteOrderMark(t *testing.T) {
	cfg := Default()
	if err := Decode("bom.toml", []byte("\xef\xbb\xbf[hcn]\nnetwork = \"pods\"\n"), &cfg); err != nil || cfg.HCN.Network != "pods" {
		t.Fatalf("Decode: %v, network %q", err, cfg.HCN.Network)
	}
}
