package config

import (
	"errors"
	"strings"
	"testing"
)

// Issue 48: an unknown key names the key it is likely a typo of, or, for
// a key that exists in another section, that section.
func TestAnUnknownKeyNamesWhatWasMeant(t *testing.T) {
	for _, tc := range []struct {
		name, toml, want string
	}{
		{"a typo of a key of its section", "[hcn]\nnetwrok = \"nat\"\n", `:2: unknown key "hcn.netwrok": did you mean hcn.network?`},
		{"a key of another section", "[plugin]\nnetwork = \"nat\"\n", `:2: unknown key "plugin.network": network belongs in [hcn]: hcn.network`},
		{"a key before any section", "network = \"nat\"\n", `:1: unknown key "network": network belongs in [hcn]: hcn.network`},
		{"a key of two sections", "[log]\nsocket = \"x\"\n", `unknown key "log.socket": socket belongs in [nri] or [admin]: nri.socket, admin.socket`},
		{"a typo of a section", "[admision]\nnamespaces = [\"*\"]\n", `unknown key "admision": did you mean [admission]?`},
		{"a typo of a section, with a key of it", "[hnc]\nnetwork = \"nat\"\n", `unknown key "hnc": did you mean [hcn]?`},
		{"nothing near", "[hcn]\nzzzzzzzz = 1\n", `unknown key "hcn.zzzzzzzz"`},
		// issue 55: two keys equally near are both named, not one guessed
		{"two keys equally near", "[log]\nlive = \"x\"\n", `unknown key "log.live": did you mean log.file or log.level?`},
		{"no section near", "[qqqq]\n", `unknown key "qqqq": the sections are [plugin], [nri], [containerd], [hcn], [kubernetes], [admission], [admin], [hyperv], [log]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Default()
			err := Decode("c.toml", []byte(tc.toml), &cfg)
			if !errors.Is(err, ErrUnknownKey) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want ErrUnknownKey saying %s", err, tc.want)
			}
			if tc.name == "nothing near" && strings.Contains(err.Error(), "did you mean") {
				t.Fatalf("nothing is near, yet: %v", err)
			}
		})
	}
}
