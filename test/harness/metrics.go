// The plugin's own account of itself: /metrics and /healthz, which tests
// wait on instead of log lines.

package harness

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Metrics returns the plugin's metric samples (name{labels} -> value): its
// own, and go_goroutines.
func (e *Env) Metrics() (map[string]float64, error) {
	res, err := http.Get("http://" + e.AdminAddr + "/metrics")
	if err != nil {
		if e.Plugin != nil && e.Plugin.Gone() != "" { // not a slow start: say how it ended
			return nil, fmt.Errorf("%w: the %s", err, e.Plugin.Gone())
		}
		return nil, err
	}
	defer res.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") || !(strings.HasPrefix(line, "nri_hcn_portmap_") || strings.HasPrefix(line, "go_goroutines")) {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			return nil, fmt.Errorf("metric line %q: %w", line, err)
		}
		out[line[:i]] = v
	}
	return out, sc.Err()
}

// Sum adds the samples whose name{labels} starts with prefix, e.g.
// `nri_hcn_portmap_operations_total{kind="event-start"`.
func Sum(m map[string]float64, prefix string) float64 {
	total := 0.0
	for k, v := range m {
		if strings.HasPrefix(k, prefix) {
			total += v
		}
	}
	return total
}

// WaitMetric waits until the sum of the samples matching prefix reaches at
// least want.
func (e *Env) WaitMetric(ctx context.Context, prefix string, want float64, d time.Duration) error {
	var got float64
	err := waitFor(ctx, d, func() error {
		m, err := e.Metrics()
		if err != nil {
			return err
		}
		if got = Sum(m, prefix); got < want {
			if e.Plugin != nil && !e.Plugin.Running() {
				return fmt.Errorf("plugin exited: %s", e.Plugin.Exited())
			}
			return fmt.Errorf("%s = %v, want at least %v", prefix, got, want)
		}
		return nil
	})
	if err != nil && e.Plugin != nil {
		return fmt.Errorf("%w\n%s", err, e.Plugin.Tail(30))
	}
	return err
}
