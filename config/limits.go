package config

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"
)

// A Limit is a rule on one key's value that a JSON schema can say too: a
// whole number's range, a duration's range, or the words a string (or
// each entry of a list) may be. Limits is their one source: validate
// holds the configuration to them, and hack/schema writes them into the
// Helm chart's values.schema.json (`make schema`; test/deploy fails where
// the two differ), so the chart refuses what the plugin refuses.
type Limit struct {
	Key string
	// a whole number's range, or a duration's; NoMax: no upper bound;
	// LoOpen and HiOpen: the bound itself is outside (durations)
	Lo, Hi         int64
	NoMax          bool
	LoOpen, HiOpen bool
	// the words a string, or each entry of a list, may be; NotOnWindows:
	// words the plugin refuses on Windows, saying WindowsWhy
	Words        []string
	NotOnWindows []string
	WindowsWhy   string
	// Why follows the rule in validate's error, in parentheses
	Why string
}

// Limits are the rules of Limit, by key.
func Limits() []Limit {
	whole := func(key string, lo, hi int64, why string) Limit { return Limit{Key: key, Lo: lo, Hi: hi, Why: why} }
	atLeast := func(key string, lo int64) Limit { return Limit{Key: key, Lo: lo, NoMax: true} }
	positive := func(key string) Limit { return Limit{Key: key, LoOpen: true, NoMax: true} }
	words := func(key string, w ...string) Limit { return Limit{Key: key, Words: w} }
	return []Limit{
		{Key: "plugin.source", Words: []string{SourceNRI, SourceContainerd, SourceAuto}, NotOnWindows: []string{SourceNRI},
			WindowsWhy: "stock containerd on Windows (checked against v2.4.2) opens no NRI socket and sends no NRI pod events; " +
				"use containerd or auto (which follow containerd's events there)"},
		{Key: "plugin.resync_interval", NoMax: true, Why: "0 disables it"},
		words("plugin.mapping_sources", MappingsAnnotations, MappingsCRI),
		words("plugin.failure_policy", FailOpen, FailClosed),
		{Key: "plugin.deadline", LoOpen: true, Hi: int64(2 * time.Second), HiOpen: true, Why: "NRI's request timeout"},
		{Key: "plugin.shutdown_grace", LoOpen: true, Hi: int64(5 * time.Minute)},
		whole("plugin.max_mappings_per_pod", 1, MaxMappingsLimit, ""),
		whole("plugin.max_annotation_bytes", 64, MaxAnnotationLimit, "Kubernetes' limit for all of a pod's annotations"),
		words("admission.pod_security", PodSecurityEnforce, PodSecurityOff),
		words("admission.pod_security_default_level", Levels()...),
		words("admission.network_policy", NetworkPolicyKubernetes, NetworkPolicyKubernetesOnly, NetworkPolicyOff),
		positive("nri.reconnect_max"),
		words("hcn.backend", BackendWindows, BackendSimulated),
		words("hcn.network_type", "NAT", "L2Bridge"),
		words("hcn.default_route", RouteModes()...),
		whole("hcn.route_metric", 1, 65535, "an HNS route metric is 16 bits"),
		positive("hcn.call_timeout"),
		whole("hcn.max_concurrent_calls", 1, 64, ""),
		positive("hcn.retry_max"),
		whole("kubernetes.queue_size", 1, 65536, ""),
		{Key: "kubernetes.labels_max_age", Lo: int64(2 * time.Second), Hi: int64(24 * time.Hour),
			Why: "a watch is asked to stay open half of it, in whole seconds, and is ended within three quarters of it"},
		words("log.level", "trace", "debug", "info", "warn", "warning", "error"),
		words("log.format", "text", "json"),
		atLeast("log.max_size_mb", 1),
		atLeast("log.max_files", 0),
	}
}

// IsDuration is whether the limit's key is a duration (its range in
// nanoseconds).
func (l Limit) IsDuration() bool { return keyType(l.Key) == reflect.TypeOf(Duration{}) }

// Rule is the limit in validate's words: "must be 1 to 64".
func (l Limit) Rule() string {
	var s string
	switch {
	case l.Words != nil:
		if len(l.Words) == 2 {
			s = "must be " + l.Words[0] + " or " + l.Words[1]
		} else {
			s = "must be one of " + strings.Join(l.Words, ", ")
		}
	case l.IsDuration():
		hi := Short(time.Duration(l.Hi))
		switch {
		case l.LoOpen && l.NoMax:
			s = "must be positive"
		case l.NoMax:
			s = "must be 0 or positive"
		case l.LoOpen && l.HiOpen:
			s = "must be positive and below " + hi
		case l.LoOpen:
			s = "must be positive and at most " + hi
		default:
			s = "must be " + Short(time.Duration(l.Lo)) + " to " + hi
		}
	case l.NoMax && l.Lo == 0:
		s = "must be 0 or more"
	case l.NoMax:
		s = fmt.Sprintf("must be at least %d", l.Lo)
	default:
		s = fmt.Sprintf("must be %d to %d", l.Lo, l.Hi)
	}
	if l.Why != "" {
		s += " (" + l.Why + ")"
	}
	return s
}

// Check is whether v, the key's value, keeps the limit on goos, and if it
// does not, why.
func (l Limit) Check(v any, goos string) (why string, ok bool) {
	word, _ := v.(string)
	switch {
	case !l.holds(v):
		return l.Rule(), false
	case goos == "windows" && slices.Contains(l.NotOnWindows, word):
		return l.WindowsWhy, false
	}
	return "", true
}

// Short is d as Go writes it, without its zero minutes and seconds: 5m,
// 24h, 1m30s.
func Short(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

func (l Limit) holds(v any) bool {
	switch v := v.(type) {
	case string:
		return slices.Contains(l.Words, v)
	case int:
		return l.inRange(int64(v))
	case Duration:
		return l.inRange(int64(v.Duration))
	}
	return false
}

func (l Limit) inRange(n int64) bool {
	if n < l.Lo || (l.LoOpen && n == l.Lo) {
		return false
	}
	return l.NoMax || n < l.Hi || (!l.HiOpen && n == l.Hi)
}

// LimitOf is key's limit; ok false if it has none.
func LimitOf(key string) (Limit, bool) {
	i := slices.IndexFunc(Limits(), func(l Limit) bool { return l.Key == key })
	if i < 0 {
		return Limit{}, false
	}
	return Limits()[i], true
}

// checkLimits holds c to every limit, calling bad for each value out of
// it (a list's each entry). The admission section's are Admission.Parse's,
// which validate runs.
func (c *Config) checkLimits(goos string, bad func(key string, value any, why string)) {
	for _, l := range Limits() {
		if strings.HasPrefix(l.Key, "admission.") {
			continue
		}
		v := valueOf(c, l.Key)
		if list, ok := v.([]string); ok {
			for _, e := range list {
				if why, ok := l.Check(e, goos); !ok {
					bad(l.Key, e, why)
				}
			}
			continue
		}
		if why, ok := l.Check(v, goos); !ok {
			if d, isDuration := v.(Duration); isDuration {
				v = d.Duration
			}
			bad(l.Key, v, why)
		}
	}
}

// valueOf is the value of key (section.key, by the toml tags) in c.
func valueOf(c *Config, key string) any {
	sec, name, _ := strings.Cut(key, ".")
	cv := reflect.ValueOf(c).Elem()
	for i := range cv.NumField() {
		if cv.Type().Field(i).Tag.Get("toml") != sec {
			continue
		}
		sv := cv.Field(i)
		for j := range sv.NumField() {
			if strings.Split(sv.Type().Field(j).Tag.Get("toml"), ",")[0] == name {
				return sv.Field(j).Interface()
			}
		}
	}
	panic("config: no key " + key) // a Limit names a key that is none: a test catches it
}

// keyType is the Go type of key's value.
func keyType(key string) reflect.Type { return reflect.TypeOf(valueOf(&Config{}, key)) }
