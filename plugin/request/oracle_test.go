package request

// Test oracles: the plain definitions the fast code is checked against.

// defaultLimits are the limits of a default configuration
// (config.Default: plugin.max_mappings_per_pod, plugin.max_annotation_bytes).
func defaultLimits() Limits { return Limits{MaxMappings: 64, MaxBytes: 16 << 10} }

// Overlap reports whether two mappings claim the same host port: same
// protocol and host port, and host IPs that can coincide (no host IP, or an
// unspecified one of the same family, overlaps every address).
func Overlap(a, b PortMapping) bool {
	if a.Protocol != b.Protocol || a.HostPort != b.HostPort {
		return false
	}
	if !a.HostIP.IsValid() || !b.HostIP.IsValid() {
		return true
	}
	if a.HostIP.Is4() != b.HostIP.Is4() {
		return false
	}
	return a.HostIP.IsUnspecified() || b.HostIP.IsUnspecified() || a.HostIP == b.HostIP
}
