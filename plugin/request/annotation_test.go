package request

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
)

func m(proto hcn.Protocol, host, cont uint16, ip string) PortMapping {
	pm := PortMapping{Protocol: proto, HostPort: host, ContainerPort: cont}
	if ip != "" {
		pm.HostIP = netip.MustParseAddr(ip)
	}
	return pm
}

func TestParsePortMappingsAccepts(t *testing.T) {
	tests := []struct {
		name, in string
		want     []PortMapping
	}{
		{"empty", "", nil},
		{"blank", "   ", nil},
		{"compact tcp default", "8080:80", []PortMapping{m(hcn.TCP, 8080, 80, "")}},
		{"compact udp", "8080:80/udp", []PortMapping{m(hcn.UDP, 8080, 80, "")}},
		{"compact protocol case-insensitive", "53:53/UDP,80:80/Tcp", []PortMapping{m(hcn.UDP, 53, 53, ""), m(hcn.TCP, 80, 80, "")}},
		{"compact ipv4 host ip", "10.0.0.4:8443:443/tcp", []PortMapping{m(hcn.TCP, 8443, 443, "10.0.0.4")}},
		{"compact ipv6 host ip", "[fd00::4]:8080:80", []PortMapping{m(hcn.TCP, 8080, 80, "fd00::4")}},
		{"compact list with spaces", " 8080:80 , 9090:90/udp ", []PortMapping{m(hcn.TCP, 8080, 80, ""), m(hcn.UDP, 9090, 90, "")}},
		{"compact port bounds", "1:65535", []PortMapping{m(hcn.TCP, 1, 65535, "")}},
		{"same port both protocols", "53:53/tcp,53:53/udp", []PortMapping{m(hcn.TCP, 53, 53, ""), m(hcn.UDP, 53, 53, "")}},
		{"same port distinct host ips", "10.0.0.4:80:80,10.0.0.5:80:81", []PortMapping{m(hcn.TCP, 80, 80, "10.0.0.4"), m(hcn.TCP, 80, 81, "10.0.0.5")}},
		{"same port v4 and v6 host ips", "10.0.0.4:80:80,[fd00::4]:80:80", []PortMapping{m(hcn.TCP, 80, 80, "10.0.0.4"), m(hcn.TCP, 80, 80, "fd00::4")}},
		{"json list", `[{"containerPort":80,"hostPort":8080,"protocol":"TCP","hostIP":"10.0.0.4"}]`, []PortMapping{m(hcn.TCP, 8080, 80, "10.0.0.4")}},
		{"json list defaults to tcp", `[{"containerPort":80,"hostPort":8080},{"containerPort":53,"hostPort":53,"protocol":"udp"}]`,
			[]PortMapping{m(hcn.TCP, 8080, 80, ""), m(hcn.UDP, 53, 53, "")}},
		{"json list ipv6", `[ {"containerPort":80,"hostPort":8080,"hostIP":"fd00::4"} ]`, []PortMapping{m(hcn.TCP, 8080, 80, "fd00::4")}},
		{"empty json list", `[]`, []PortMapping{}},
		// issue 54: the blanks the grammar ignores are SP, HTAB and the
		// line breaks LF and CRLF, around the value and its entries
		{"compact tabs and line breaks around entries", "\t8080:80,\r\n 9090:90/udp\n", []PortMapping{m(hcn.TCP, 8080, 80, ""), m(hcn.UDP, 9090, 90, "")}},
		{"yaml list with CRLF", "- containerPort: 80\r\n  hostPort: 8080\r\n", []PortMapping{m(hcn.TCP, 8080, 80, "")}},
		{"json list with line breaks", "[\r\n {\"containerPort\": 80,\n  \"hostPort\": 8080}\n]\n", []PortMapping{m(hcn.TCP, 8080, 80, "")}},
		{"yaml list", "- containerPort: 80\n  hostPort: 8080\n  protocol: UDP\n- containerPort: 443\n  hostPort: 8443\n  hostIP: 10.0.0.4\n",
			[]PortMapping{m(hcn.UDP, 8080, 80, ""), m(hcn.TCP, 8443, 443, "10.0.0.4")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParsePortMappings(tt.in, Limits{})
			if err != nil {
				t.Fatalf("ParsePortMappings(%q): %v", tt.in, err)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("ParsePortMappings(%q) = %v, want %v", tt.in, got, tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Errorf("mapping %d = %v, want %v", i, got[i], tt.want[i])
				}
			}
		})
	}
}

func TestParsePortMappingsRejects(t *testing.T) {
	tests := []struct {
		name, in string
		// every fragment must appear in the error: the entry and the reason
		want []string
	}{
		{"host port zero", "0:80", []string{`"0:80"`, "host port 0 is outside 1-65535"}},
		{"container port too big", "8080:65536", []string{`"8080:65536"`, "container port 65536 is outside 1-65535"}},
		{"negative port", "-1:80", []string{`host port "-1" is not a plain decimal number`}},
		{"port not a number", "http:80", []string{`host port "http" is not a plain decimal number`}},
		{"sctp", "8080:80/sctp", []string{`"8080:80/sctp"`, "SCTP is not supported by HNS"}},
		{"unknown protocol", "8080:80/icmp", []string{`unknown protocol "icmp"`}},
		{"empty protocol", "8080:80/", []string{"empty protocol"}},
		{"bad ipv4", "10.0.0.300:8080:80", []string{`"10.0.0.300:8080:80"`, `host IP "10.0.0.300" is not an IP address`}},
		{"bare ipv6", "fd00::4:8080:80", []string{"want [hostIP:]hostPort:containerPort"}},
		{"unclosed bracket", "[fd00::4:8080:80", []string{"unclosed '['"}},
		{"ipv6 zone", "[fe80::1%eth0]:80:80", []string{"zones are not supported"}},
		{"multicast", "224.0.0.1:80:80", []string{"multicast"}},
		{"single port", "8080", []string{`"8080"`, "want [hostIP:]hostPort:containerPort"}},
		{"empty entry", "8080:80,,9090:90", []string{`""`, "empty entry"}},
		{"trailing comma", "8080:80,", []string{"empty entry"}},
		{"exact duplicate", "8080:80,8080:80", []string{"duplicates entry"}},
		{"overlap wildcard", "8080:80,10.0.0.4:8080:81", []string{`entry "10.0.0.4:8080:81": host port 8080/tcp overlaps entry "8080:80"`}},
		{"overlap unspecified v4", "0.0.0.0:8080:80,10.0.0.4:8080:81", []string{"overlaps entry"}},
		{"json bad port", `[{"containerPort":80,"hostPort":70000}]`, []string{"#1", "hostPort 70000 is outside 1-65535"}},
		{"json missing hostPort", `[{"containerPort":80}]`, []string{"#1", "hostPort is missing"}},
		{"json missing containerPort", `[{"hostPort":80}]`, []string{"containerPort is missing"}},
		{"json sctp", `[{"containerPort":80,"hostPort":80,"protocol":"SCTP"}]`, []string{"SCTP is not supported by HNS"}},
		{"json bad ip", `[{"containerPort":80,"hostPort":80,"hostIP":"nope"}]`, []string{`host IP "nope"`}},
		{"json unknown field", `[{"containerPort":80,"hostPort":80,"hostport":81}]`, []string{"not a valid JSON/YAML list", "hostport"}},
		{"json port as string", `[{"containerPort":"80","hostPort":80}]`, []string{"not a valid JSON/YAML list"}},
		{"json malformed", `[{"containerPort":80,`, []string{"not a valid JSON/YAML list"}},
		{"json duplicate", `[{"containerPort":80,"hostPort":80},{"containerPort":80,"hostPort":80}]`, []string{"duplicates entry"}},
		{"yaml second entry bad", "- containerPort: 80\n  hostPort: 8080\n- containerPort: 0\n  hostPort: 1\n", []string{"#2", "containerPort 0"}},
		// one reading of the annotation: what the list form takes, a
		// policy engine reading it sees the same (no last-wins key, no
		// hidden document, no number the compact form would refuse)
		{"yaml duplicate key", "- {containerPort: 80, hostPort: 8080, containerPort: 81}\n", []string{"not a valid JSON/YAML list", `"containerPort"`, "twice"}},
		{"yaml duplicate key, block", "- containerPort: 80\n  hostPort: 8080\n  hostPort: 9090\n", []string{`"hostPort"`, "twice"}},
		{"yaml second document", "- containerPort: 80\n  hostPort: 8080\n---\n- containerPort: 81\n  hostPort: 3389\n", []string{"one YAML document"}},
		{"yaml hex port", "- containerPort: 80\n  hostPort: 0x1f90\n", []string{`hostPort "0x1f90"`, "decimal"}},
		{"yaml octal port", "- containerPort: 0o120\n  hostPort: 8080\n", []string{`containerPort "0o120"`, "decimal"}},
		{"yaml leading zero", "- containerPort: 080\n  hostPort: 8080\n", []string{`containerPort "080"`}},
		{"yaml underscore", "- containerPort: 80\n  hostPort: 8_080\n", []string{`hostPort "8_080"`}},
		{"yaml float", "- containerPort: 80\n  hostPort: 8080.0\n", []string{`hostPort "8080.0"`}},
		{"yaml plus sign", "- containerPort: 80\n  hostPort: +8080\n", []string{`hostPort "+8080"`}},
		{"json float", `[{"containerPort":80,"hostPort":8080.0}]`, []string{"not a valid JSON/YAML list"}},
		{"json exponent", `[{"containerPort":80,"hostPort":8e3}]`, []string{"not a valid JSON/YAML list"}},
		{"json duplicate key", `[{"containerPort":80,"hostPort":8080,"containerPort":81}]`, []string{"not a valid JSON/YAML list"}},
		// issue 46: every spelling with another reading is refused, not
		// only the ones thought of: tags, merge keys, anchors, aliases,
		// keys beyond the four, signs and leading zeros in the compact form
		{"yaml tagged hex", "- containerPort: 80\n  hostPort: !!int 0x1f90\n", []string{"tags (!!int)"}},
		{"yaml tagged octal", "- containerPort: 80\n  hostPort: !!int 0o17702\n", []string{"tags (!!int)"}},
		{"yaml tagged plus", "- containerPort: 80\n  hostPort: !!int +8080\n", []string{"tags"}},
		{"yaml tagged underscore", "- {containerPort: 80, hostPort: !!int 8_080}\n", []string{"tags"}},
		{"yaml tagged plain", "- containerPort: 80\n  hostPort: !!int 8080\n", []string{"tags"}},
		{"yaml tagged string", "- containerPort: 80\n  hostPort: 8080\n  protocol: !!str udp\n", []string{"tags (!!str)"}},
		{"yaml tagged entry", "- !!map {containerPort: 80, hostPort: 8080}\n", []string{"tags"}},
		{"yaml tagged list", "!!seq\n- {containerPort: 80, hostPort: 8080}\n", []string{"entry"}}, // not read as a list at all
		{"yaml merge key", "- {containerPort: 80, hostPort: 8080, <<: {hostPort: 9090}}\n", []string{`key "<<"`}},
		{"yaml anchor", "- &web {containerPort: 80, hostPort: 8080}\n", []string{"anchors (&web)"}},
		{"yaml alias entry", "- &web {containerPort: 80, hostPort: 8080}\n- *web\n", []string{"anchors"}},
		{"yaml alias value", "- {containerPort: &p 80, hostPort: 8080}\n- {containerPort: 81, hostPort: *p}\n", []string{"anchors (&p)"}},
		{"yaml quoted port", "- containerPort: 80\n  hostPort: \"8080\"\n", []string{`hostPort "8080" is not a plain decimal`}},
		{"yaml nested value", "- containerPort: 80\n  hostPort: [8080]\n", []string{"hostPort takes a single value"}},
		{"yaml a list of lists", "- [80, 8080]\n", []string{"an entry is a mapping"}},
		{"yaml complex key", "- {? [a]: 1, containerPort: 80, hostPort: 8080}\n", []string{"is not one of"}},
		{"compact plus sign", "+8080:80", []string{`host port "+8080" is not a plain decimal number`}},
		{"compact leading zero", "03389:80", []string{`host port "03389"`}},
		{"compact leading zero, container", "8080:080", []string{`container port "080"`}},
		{"compact plus, with host IP", "10.0.0.4:+8080:80", []string{`"+8080"`}},
		// issue 54: exactly the documented grammar; every other spelling
		// is refused, not read (a policy engine may read it otherwise)
		{"compact blank inside an entry", "8080 : 80", []string{`host port "8080 " is not a plain decimal number`}},
		{"compact blank before the protocol", "8080:80/ udp", []string{`unknown protocol " udp"`}},
		{"compact no-break space inside", "8080:\u00a080", []string{`container port "\u00a080"`}},
		{"compact no-break space around", "\u00a08080:80", []string{`host port "\u00a08080"`}},
		{"compact em space around", "8080:80\u2003", []string{`container port "80\u2003"`}},
		{"compact ideographic space around the value", "\u30008080:80", []string{"not a plain decimal"}},
		{"compact bracketed ipv4", "[10.0.0.4]:8080:80", []string{"host IP [10.0.0.4] is no IPv6 address"}},
		{"compact blank in the host IP", " 10.0.0.4 :8080:80", []string{`host IP "10.0.0.4 " is not an IP address`}},
		{"compact ipv4-mapped ipv6", "[::ffff:10.0.0.4]:8080:80", []string{"IPv4-mapped", "write the IPv4 address 10.0.0.4"}},
		{"json ipv4-mapped ipv6", `[{"containerPort":80,"hostPort":8080,"hostIP":"::ffff:10.0.0.4"}]`, []string{"IPv4-mapped"}},
		{"json protocol with blanks", `[{"containerPort":80,"hostPort":8080,"protocol":" UDP "}]`, []string{`unknown protocol " UDP "`}},
		{"json host IP with blanks", `[{"containerPort":80,"hostPort":8080,"hostIP":" 10.0.0.4"}]`, []string{`host IP " 10.0.0.4" is not an IP address`}},
		{"yaml NEL line break", "- containerPort: 80\u0085  hostPort: 8080\n", []string{"U+0085", "line breaks are LF or CRLF"}},
		{"yaml LS line break", "- containerPort: 80\u2028  hostPort: 8080\n", []string{"U+2028"}},
		{"yaml PS line break", "- containerPort: 80\u2029  hostPort: 8080\n", []string{"U+2029"}},
		{"a lone carriage return", "- containerPort: 80\r  hostPort: 8080\n", []string{"carriage return without a line feed"}},
		{"compact NEL between entries", "8080:80,\u00859090:90", []string{"U+0085"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParsePortMappings(tt.in, Limits{})
			if err == nil {
				t.Fatalf("ParsePortMappings(%q) = %v, want an error", tt.in, got)
			}
			if !errors.Is(err, ErrBadMapping) {
				t.Errorf("error %v does not wrap ErrBadMapping", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

// compactEntries returns n distinct, non-overlapping compact entries.
func compactEntries(n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, "%d:80", 1024+i)
	}
	return b.String()
}

func listEntries(n int) string {
	var b strings.Builder
	b.WriteString("[")
	for i := range n {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `{"containerPort":80,"hostPort":%d}`, 1024+i)
	}
	b.WriteString("]")
	return b.String()
}

func TestParsePortMappingsLimits(t *testing.T) {
	lim := Limits{MaxMappings: 8, MaxBytes: 4096}
	huge := strings.Repeat("8080:80,", 256<<10/8) // a 256 KiB annotation, as large as Kubernetes allows
	tests := []struct {
		name string
		in   string
		lim  Limits
		want int      // mappings accepted, when err is empty
		err  []string // fragments of the error
	}{
		{"compact at the cap", compactEntries(8), lim, 8, nil},
		{"compact one over", compactEntries(9), lim, 0, []string{"9 entries", "limit of 8", KeyMaxMappings}},
		{"list at the cap", listEntries(8), lim, 8, nil},
		{"list one over", listEntries(9), lim, 0, []string{"9 entries", "limit of 8", KeyMaxMappings}},
		{"bytes at the cap", "8080:80" + strings.Repeat(" ", 4096-7), lim, 1, nil},
		{"bytes one over", "8080:80" + strings.Repeat(" ", 4096-6), lim, 0, []string{"4097 bytes", "limit of 4096", KeyMaxBytes}},
		{"256 KiB rejected on its size", huge, defaultLimits(), 0, []string{fmt.Sprintf("%d bytes", len(huge)), "limit of 16384", KeyMaxBytes}},
		{"count before entries are checked", strings.Repeat("x,", 9) + "x", lim, 0, []string{"10 entries"}},
		{"no limits", compactEntries(2000), Limits{}, 2000, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParsePortMappings(tt.in, tt.lim)
			if tt.err == nil {
				if err != nil || len(got) != tt.want {
					t.Fatalf("= %d mappings, %v; want %d", len(got), err, tt.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("= %d mappings, want an error", len(got))
			}
			if !errors.Is(err, ErrTooLarge) || !errors.Is(err, ErrBadMapping) {
				t.Errorf("error %v should wrap ErrTooLarge and ErrBadMapping", err)
			}
			for _, w := range tt.err {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

// naiveFirstOverlap is the quadratic definition CheckOverlaps must agree
// with: the first entry that duplicates or overlaps an earlier one, against
// the earliest such.
func naiveFirstOverlap(ms []PortMapping) (i, j int, dup bool) {
	for i := range ms {
		for j := range i {
			if ms[i] == ms[j] || Overlap(ms[i], ms[j]) {
				return i, j, ms[i] == ms[j]
			}
		}
	}
	return -1, -1, false
}

func TestCheckOverlapsAgreesWithPairwiseDefinition(t *testing.T) {
	ips := []string{"", "0.0.0.0", "::", "10.0.0.4", "10.0.0.5", "fd00::4", "fd00::5"}
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 20000 {
		n := 1 + rng.IntN(6)
		ms := make([]PortMapping, n)
		for k := range ms {
			proto := hcn.TCP
			if rng.IntN(2) == 0 {
				proto = hcn.UDP
			}
			ms[k] = m(proto, uint16(80+rng.IntN(2)), uint16(80+rng.IntN(2)), ips[rng.IntN(len(ips))])
		}
		name := func(i int) string { return fmt.Sprintf("#%d", i) }
		err := CheckOverlaps(ms, name)
		i, j, dup := naiveFirstOverlap(ms)
		if i < 0 {
			if err != nil {
				t.Fatalf("round %d: %v: unexpected %v", round, ms, err)
			}
			continue
		}
		want := fmt.Sprintf("entry #%d: ", i)
		if dup {
			want += fmt.Sprintf("duplicates entry #%d", j)
		} else {
			want += fmt.Sprintf("overlaps entry #%d", j)
		}
		if err == nil || !strings.HasPrefix(err.Error(), fmt.Sprintf("entry #%d: ", i)) || !strings.HasSuffix(err.Error(), want[len(fmt.Sprintf("entry #%d: ", i)):]) {
			t.Fatalf("round %d: %v: err = %v, want %q", round, ms, err, want)
		}
	}
}

// run is n mappings from host port host and container port cont up.
func run(proto hcn.Protocol, host, cont uint16, n int, ip string) []PortMapping {
	var out []PortMapping
	for i := range n {
		out = append(out, m(proto, host+uint16(i), cont+uint16(i), ip))
	}
	return out
}

// Issue 56: a range of ports in either form, port by port, each side of
// one width; a host IP allowed.
func TestARangeMapsPortByPort(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     []PortMapping
	}{
		{"compact", "10000-10002:20000-20002/udp", run(hcn.UDP, 10000, 20000, 3, "")},
		{"compact with a host IP", "10.0.0.4:10000-10001:10000-10001", run(hcn.TCP, 10000, 10000, 2, "10.0.0.4")},
		{"compact IPv6", "[fd00::4]:5060-5061:5060-5061/udp", run(hcn.UDP, 5060, 5060, 2, "fd00::4")},
		{"compact one port written as a range", "8080-8080:80-80", run(hcn.TCP, 8080, 80, 1, "")},
		{"compact beside single ports", "8080:80, 10000-10001:10000-10001/udp",
			append([]PortMapping{m(hcn.TCP, 8080, 80, "")}, run(hcn.UDP, 10000, 10000, 2, "")...)},
		{"the top of the port space", "65534-65535:1-2", run(hcn.TCP, 65534, 1, 2, "")},
		{"json", `[{"containerPort":10000,"containerPortEnd":10002,"hostPort":30000,"hostPortEnd":30002,"protocol":"UDP"}]`,
			run(hcn.UDP, 30000, 10000, 3, "")},
		{"yaml", "- containerPort: 10000\n  containerPortEnd: 10001\n  hostPort: 10000\n  hostPortEnd: 10001\n  hostIP: 10.0.0.4\n",
			run(hcn.TCP, 10000, 10000, 2, "10.0.0.4")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParsePortMappings(tc.in, Limits{MaxMappings: 64, MaxBytes: 16 << 10})
			if err != nil || !slices.Equal(got, tc.want) {
				t.Fatalf("ParsePortMappings(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
			}
		})
	}
}

// Issue 56: the odd ranges are refused naming the entry and why; a range
// counts its ports against plugin.max_mappings_per_pod, before it is
// expanded; overlapping ranges name the first shared port.
func TestOddRangesAreRefused(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     []string
	}{
		{"reversed", "10999-10000:10999-10000", []string{`entry "10999-10000:10999-10000"`, "host port range 10999-10000 is reversed: write 10000-10999"}},
		{"unequal widths", "10000-10999:20000-20499/udp", []string{"host ports 10000-10999 (1000) and container ports 20000-20499 (500) differ in width"}},
		{"one side only", "10000-10999:80", []string{"a range on one side only (10000-10999:80)"}},
		{"a range past 65535", "65535-65536:1-2", []string{"host port 65536 is outside 1-65535"}},
		{"an open range", "10000-:10000-", []string{`host port "10000-" is not a plain decimal number`}},
		{"three parts", "1-2-3:1-2-3", []string{`host port "2-3" is not a plain decimal number`}},
		{"overlapping ranges", "10000-10010:10000-10010/udp,10005-10020:20005-20020/udp",
			[]string{`entry "10005-10020:20005-20020/udp": host port 10005/udp overlaps entry "10000-10010:10000-10010/udp"`}},
		{"a range over a single port", "10003:80/udp,10000-10010:10000-10010/udp",
			[]string{`entry "10000-10010:10000-10010/udp": host port 10003/udp overlaps entry "10003:80/udp"`}},
		{"over the budget", "8080:80,10000-10063:10000-10063",
			[]string{`entry "10000-10063:10000-10063": 65 host ports (a range counts its ports), more than the limit of 64 (plugin.max_mappings_per_pod)`}},
		{"the whole port space", "1-65535:1-65535", []string{"65535 host ports (a range counts its ports), more than the limit of 64"}},
		{"json end without start's pair", `[{"containerPort":1,"hostPort":1,"hostPortEnd":2}]`, []string{"#1", "a range on one side only"}},
		{"json reversed", `[{"containerPort":2,"containerPortEnd":1,"hostPort":2,"hostPortEnd":1}]`, []string{"hostPortEnd 1 is below hostPort 2"}},
		{"json unequal", `[{"containerPort":1,"containerPortEnd":3,"hostPort":1,"hostPortEnd":2}]`, []string{"differ in width"}},
		{"yaml end quoted", "- containerPort: 1\n  containerPortEnd: \"2\"\n  hostPort: 1\n  hostPortEnd: 2\n", []string{`containerPortEnd "2" is not a plain decimal number`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParsePortMappings(tc.in, Limits{MaxMappings: 64, MaxBytes: 16 << 10})
			if err == nil || !errors.Is(err, ErrBadMapping) {
				t.Fatalf("ParsePortMappings(%q) = %v, %v; want refused", tc.in, got, err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%q: error %q does not say %q", tc.in, err, w)
				}
			}
		})
	}
}
