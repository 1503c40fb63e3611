package schema

import (
	"fmt"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/config"
)

// Range matches exactly the numbers in its range, as written (no leading
// zeros), for every range within 0-2100 that starts on an edge.
func TestRangeMatchesExactlyItsNumbers(t *testing.T) {
	edges := []int64{0, 1, 5, 9, 10, 11, 19, 64, 99, 100, 101, 999, 1000, 1024, 1999, 2000}
	for _, lo := range edges {
		for _, hi := range edges {
			if hi < lo {
				continue
			}
			re := regexp.MustCompile("^(" + Range(lo, hi) + ")$")
			for n := int64(0); n <= 2100; n++ {
				if got, want := re.MatchString(strconv.FormatInt(n, 10)), n >= lo && n <= hi; got != want {
					t.Fatalf("Range(%d, %d) = %s: %d matched %v", lo, hi, Range(lo, hi), n, got)
				}
			}
			if re.MatchString("0" + strconv.FormatInt(lo, 10)) {
				t.Errorf("Range(%d, %d) takes a leading zero", lo, hi)
			}
		}
	}
}

// Issue 39: what the schema's pattern for a duration takes, the plugin's
// limit takes (every number 0-3000 with every unit, and the plugin's own
// spellings of the edges); where the limit has an upper bound, each of
// its edges is takeable in some unit.
func TestADurationsPatternTakesWhatItsLimitTakes(t *testing.T) {
	for _, l := range config.Limits() {
		if !l.IsDuration() {
			continue
		}
		t.Run(l.Key, func(t *testing.T) {
			re := regexp.MustCompile(DurationPattern(l))
			var spellings []string
			for n := range 3001 {
				for _, u := range []string{"ns", "us", "ms", "s", "m", "h"} {
					spellings = append(spellings, fmt.Sprintf("%d%s", n, u))
				}
			}
			spellings = append(spellings, "1.5s", "1m30s", "-1s", "", "5", time.Duration(l.Lo).String(), time.Duration(l.Hi).String())
			taken := 0
			for _, s := range spellings {
				if !re.MatchString(s) {
					continue
				}
				taken++
				d, err := time.ParseDuration(s)
				if err != nil {
					t.Fatalf("%q: the pattern takes what Go does not parse: %v", s, err)
				}
				if why, ok := l.Check(config.Duration{Duration: d}, "windows"); !ok {
					t.Errorf("%q: the pattern takes it, the plugin refuses it: %s", s, why)
				}
			}
			if taken == 0 {
				t.Fatal("the pattern takes nothing")
			}
			if !l.NoMax {
				for _, edge := range []int64{l.Lo + boolOf(l.LoOpen)*int64(time.Millisecond), l.Hi - boolOf(l.HiOpen)*int64(time.Millisecond)} {
					if !re.MatchString(fmt.Sprintf("%dms", edge/int64(time.Millisecond))) {
						t.Errorf("%dms, an edge of the range, is refused", edge/int64(time.Millisecond))
					}
				}
			}
		})
	}
}

func boolOf(b bool) int64 {
	if b {
		return 1
	}
	return 0
}
