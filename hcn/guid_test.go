package hcn

import "testing"

func TestCanonicalGUID(t *testing.T) {
	const want = "0452913B-E445-438B-8922-374E5A15C9B4"
	for _, in := range []string{
		"0452913B-E445-438B-8922-374E5A15C9B4",   // HNS
		"0452913b-e445-438b-8922-374e5a15c9b4",   // an OCI spec in lower case
		"{0452913b-e445-438b-8922-374e5a15c9b4}", // braces
		" {0452913B-E445-438B-8922-374E5A15C9B4} ",
	} {
		if got := CanonicalGUID(in); got != want {
			t.Errorf("CanonicalGUID(%q) = %q, want %q", in, got, want)
		}
	}
	for in, want := range map[string]string{
		"00000000-0000-0000-0000-000000000000":   "", // HNS's "attached to none"
		"{00000000-0000-0000-0000-000000000000}": "",
		"":                                       "",
		"not-a-guid":                             "not-a-guid",
	} {
		if got := CanonicalGUID(in); got != want {
			t.Errorf("CanonicalGUID(%q) = %q, want %q", in, got, want)
		}
	}
}
