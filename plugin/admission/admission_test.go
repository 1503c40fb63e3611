package admission

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/config"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/request"
)

func mp(proto hcn.Protocol, host uint16, ip string) request.PortMapping {
	m := request.PortMapping{Protocol: proto, HostPort: host, ContainerPort: 80}
	if ip != "" {
		m.HostIP = netip.MustParseAddr(ip)
	}
	return m
}

func TestAdmit(t *testing.T) {
	web := Pod{Namespace: "shop", Labels: map[string]string{"app": "web", "tier": "front"}}
	tests := []struct {
		name      string
		rules     config.Admission
		dualStack bool
		pod       Pod
		mappings  []request.PortMapping
		rule      string // "" = allowed; else a fragment of the denying rule
	}{
		{"defaults allow a high port", config.DefaultAdmission(), false, web, []request.PortMapping{mp(hcn.TCP, 8080, "")}, ""},
		{"defaults deny below 1024", config.DefaultAdmission(), false, web, []request.PortMapping{mp(hcn.TCP, 80, "")}, "host_port_ranges"},
		{"defaults deny RDP tcp", config.DefaultAdmission(), false, web, []request.PortMapping{mp(hcn.TCP, 3389, "")}, `admission.deny[0] = "3389"`},
		{"defaults deny RDP udp", config.DefaultAdmission(), false, web, []request.PortMapping{mp(hcn.UDP, 3389, "")}, `"3389"`},
		{"defaults deny WinRM https", config.DefaultAdmission(), false, web, []request.PortMapping{mp(hcn.TCP, 5986, "")}, `"5985-5986"`},
		{"defaults deny WinRM listener", config.DefaultAdmission(), false, web, []request.PortMapping{mp(hcn.TCP, 47001, "")}, `"47001"`},
		{"defaults deny kubelet", config.DefaultAdmission(), false, web, []request.PortMapping{mp(hcn.TCP, 10250, "")}, `"10248-10250"`},
		{"defaults deny kubelet read-only", config.DefaultAdmission(), false, web, []request.PortMapping{mp(hcn.TCP, 10255, "")}, `"10255-10256"`},
		{"defaults deny kube-proxy health", config.DefaultAdmission(), false, web, []request.PortMapping{mp(hcn.TCP, 10256, "")}, `"10255-10256"`},
		{"one bad mapping denies the pod", config.DefaultAdmission(), false, web, []request.PortMapping{mp(hcn.TCP, 8080, ""), mp(hcn.TCP, 10250, "")}, "10250"},
		{"deny wins over an allowed range", config.Admission{Namespaces: []string{"*"}, HostPortRanges: []string{"1-65535"}, Deny: []string{"8080"}}, false,
			web, []request.PortMapping{mp(hcn.TCP, 8080, "")}, `admission.deny[0] = "8080"`},
		{"deny by protocol only", config.Admission{Namespaces: []string{"*"}, HostPortRanges: []string{"1-65535"}, Deny: []string{"53/udp"}}, false,
			web, []request.PortMapping{mp(hcn.TCP, 53, "")}, ""},
		{"deny by protocol hits", config.Admission{Namespaces: []string{"*"}, HostPortRanges: []string{"1-65535"}, Deny: []string{"53/udp"}}, false,
			web, []request.PortMapping{mp(hcn.UDP, 53, "")}, `"53/udp"`},
		{"low port explicitly allowed", config.Admission{Namespaces: []string{"*"}, HostPortRanges: []string{"53", "1024-65535"}}, false,
			web, []request.PortMapping{mp(hcn.UDP, 53, "")}, ""},
		{"namespace listed", config.Admission{Namespaces: []string{"shop"}, HostPortRanges: []string{"1-65535"}}, false, web, []request.PortMapping{mp(hcn.TCP, 8080, "")}, ""},
		{"namespace not listed", config.Admission{Namespaces: []string{"ingress"}, HostPortRanges: []string{"1-65535"}}, false, web, []request.PortMapping{mp(hcn.TCP, 8080, "")}, `namespace "shop" is not listed`},
		{"no namespaces at all", config.Admission{HostPortRanges: []string{"1-65535"}}, false, web, []request.PortMapping{mp(hcn.TCP, 8080, "")}, "admission.namespaces"},
		{"selector matches", config.Admission{Namespaces: []string{"*"}, PodSelector: "app=web, tier, !debug, env!=prod", HostPortRanges: []string{"1-65535"}}, false,
			web, []request.PortMapping{mp(hcn.TCP, 8080, "")}, ""},
		{"selector value differs", config.Admission{Namespaces: []string{"*"}, PodSelector: "app==db", HostPortRanges: []string{"1-65535"}}, false,
			web, []request.PortMapping{mp(hcn.TCP, 8080, "")}, `admission.pod_selector = "app==db"`},
		{"selector set membership", config.Admission{Namespaces: []string{"*"}, PodSelector: "app in (web, api), tier notin (db)", HostPortRanges: []string{"1-65535"}}, false,
			web, []request.PortMapping{mp(hcn.TCP, 8080, "")}, ""},
		{"selector set membership denies", config.Admission{Namespaces: []string{"*"}, PodSelector: "app in (db, api)", HostPortRanges: []string{"1-65535"}}, false,
			web, []request.PortMapping{mp(hcn.TCP, 8080, "")}, `admission.pod_selector = "app in (db, api)"`},
		{"selector forbids a label", config.Admission{Namespaces: []string{"*"}, PodSelector: "!tier", HostPortRanges: []string{"1-65535"}}, false,
			web, []request.PortMapping{mp(hcn.TCP, 8080, "")}, "pod_selector"},
		{"host ip inside", config.Admission{Namespaces: []string{"*"}, HostPortRanges: []string{"1-65535"}, HostIPs: []string{"10.0.0.0/24"}}, false,
			web, []request.PortMapping{mp(hcn.TCP, 8080, "10.0.0.4")}, ""},
		{"host ip outside", config.Admission{Namespaces: []string{"*"}, HostPortRanges: []string{"1-65535"}, HostIPs: []string{"10.0.0.0/24"}}, false,
			web, []request.PortMapping{mp(hcn.TCP, 8080, "10.0.1.4")}, "host IP 10.0.1.4 is outside"},
		{"single host ip", config.Admission{Namespaces: []string{"*"}, HostPortRanges: []string{"1-65535"}, HostIPs: []string{"fd00::4"}}, false,
			web, []request.PortMapping{mp(hcn.TCP, 8080, "fd00::4")}, ""},
		{"ipv6 outside", config.Admission{Namespaces: []string{"*"}, HostPortRanges: []string{"1-65535"}, HostIPs: []string{"fd00::/64"}}, false,
			web, []request.PortMapping{mp(hcn.TCP, 8080, "fd01::4")}, "host IP fd01::4 is outside"},
		{"wildcard needs the whole family", config.Admission{Namespaces: []string{"*"}, HostPortRanges: []string{"1-65535"}, HostIPs: []string{"10.0.0.0/8"}}, false,
			web, []request.PortMapping{mp(hcn.TCP, 8080, "")}, "(every address) is outside"},
		{"unspecified v4 needs 0.0.0.0/0", config.Admission{Namespaces: []string{"*"}, HostPortRanges: []string{"1-65535"}, HostIPs: []string{"10.0.0.0/8"}}, false,
			web, []request.PortMapping{mp(hcn.TCP, 8080, "0.0.0.0")}, "host IP 0.0.0.0 is outside"},
		{"wildcard allowed by 0.0.0.0/0", config.Admission{Namespaces: []string{"*"}, HostPortRanges: []string{"1-65535"}, HostIPs: []string{"0.0.0.0/0"}}, false,
			web, []request.PortMapping{mp(hcn.TCP, 8080, "")}, ""},
		{"dual stack wildcard needs ::/0 too", config.Admission{Namespaces: []string{"*"}, HostPortRanges: []string{"1-65535"}, HostIPs: []string{"0.0.0.0/0"}}, true,
			web, []request.PortMapping{mp(hcn.TCP, 8080, "")}, "(every address)"},
		{"dual stack wildcard allowed", config.Admission{Namespaces: []string{"*"}, HostPortRanges: []string{"1-65535"}, HostIPs: []string{"0.0.0.0/0", "::/0"}}, true,
			web, []request.PortMapping{mp(hcn.TCP, 8080, "")}, ""},
		{"unspecified v6 needs ::/0", config.Admission{Namespaces: []string{"*"}, HostPortRanges: []string{"1-65535"}, HostIPs: []string{"0.0.0.0/0"}}, false,
			web, []request.PortMapping{mp(hcn.TCP, 8080, "::")}, "host IP :: is outside"},
		{"no mappings, no question", config.Admission{}, false, web, nil, ""},
		// host IPs no pod gets unless host_ips names them: the node's
		// loopback, link-local addresses, the cloud metadata and Azure
		// wire server addresses; a catch-all (/0) does not name them
		{"loopback refused by default", config.DefaultAdmission(), false, web, []request.PortMapping{mp(hcn.TCP, 8080, "127.0.0.1")}, "host IP 127.0.0.1 is the node's loopback"},
		{"ipv6 loopback refused", config.DefaultAdmission(), false, web, []request.PortMapping{mp(hcn.TCP, 8080, "::1")}, "host IP ::1 is the node's loopback"},
		{"metadata refused", config.DefaultAdmission(), false, web, []request.PortMapping{mp(hcn.TCP, 8080, "169.254.169.254")}, "host IP 169.254.169.254 is the cloud metadata address"},
		{"link-local refused", config.DefaultAdmission(), false, web, []request.PortMapping{mp(hcn.TCP, 8080, "169.254.10.1")}, "host IP 169.254.10.1 is link-local"},
		{"ipv6 link-local refused", config.DefaultAdmission(), false, web, []request.PortMapping{mp(hcn.TCP, 8080, "fe80::1")}, "is link-local"},
		{"wire server refused", config.DefaultAdmission(), false, web, []request.PortMapping{mp(hcn.TCP, 8080, "168.63.129.16")}, "Azure wire server"},
		{"a catch-all does not name them", config.Admission{Namespaces: []string{"*"}, HostPortRanges: []string{"1-65535"}, HostIPs: []string{"0.0.0.0/0"}}, false,
			web, []request.PortMapping{mp(hcn.TCP, 8080, "169.254.169.254")}, "unless admission.host_ips names it"},
		{"named, allowed", config.Admission{Namespaces: []string{"*"}, HostPortRanges: []string{"1-65535"}, HostIPs: []string{"0.0.0.0/0", "127.0.0.1"}}, false,
			web, []request.PortMapping{mp(hcn.TCP, 8080, "127.0.0.1")}, ""},
		{"the node's own address is fine", config.DefaultAdmission(), false, web, []request.PortMapping{mp(hcn.TCP, 8080, "10.0.0.4")}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Compile(withoutPodSecurity(tt.rules))
			if err != nil {
				t.Fatal(err)
			}
			err = p.WithDualStack(tt.dualStack).Admit(tt.pod, tt.mappings)
			if tt.rule == "" {
				if err != nil {
					t.Fatalf("Admit: %v, want allowed", err)
				}
				return
			}
			var d *Denial
			if !errors.As(err, &d) || !errors.Is(err, ErrDenied) || !strings.Contains(err.Error(), tt.rule) {
				t.Fatalf("Admit: %v, want a denial by %q", err, tt.rule)
			}
		})
	}
}

// withoutPodSecurity is rules with the Pod Security and NetworkPolicy
// checks off (their own tests are TestAdmitAnnotation and netpol_test.go).
func withoutPodSecurity(rules config.Admission) config.Admission {
	rules.PodSecurity, rules.PodSecurityDefaultLevel = config.PodSecurityOff, config.LevelPrivileged
	rules.NetworkPolicy = config.NetworkPolicyOff
	return rules
}

func TestCompileRejects(t *testing.T) {
	tests := []struct {
		rules config.Admission
		want  string
	}{
		{config.Admission{Namespaces: []string{"a b"}}, `admission.namespaces = "a b"`},
		{config.Admission{PodSelector: "app=web,,x"}, `admission.pod_selector = "app=web,,x"`},
		{config.Admission{PodSelector: "=web"}, `admission.pod_selector = "=web"`},
		{config.Admission{PodSelector: "a=b=c"}, `admission.pod_selector = "a=b=c"`},
		{config.Admission{PodSelector: "tier in (web"}, `admission.pod_selector = "tier in (web"`},
		{config.Admission{HostPortRanges: []string{"2000-1000"}}, `admission.host_port_ranges = "2000-1000": the low port 2000 is above the high port 1000`},
		{config.Admission{HostPortRanges: []string{"0-10"}}, `"0-10"`},
		{config.Admission{HostPortRanges: []string{"70000"}}, `"70000": ports must be within 1-65535`},
		{config.Admission{Deny: []string{"3389/sctp"}}, `admission.deny = "3389/sctp": protocol "sctp"`},
		{config.Admission{Deny: []string{"rdp"}}, `admission.deny = "rdp"`},
		{config.Admission{HostIPs: []string{"10.0.0.0/33"}}, `admission.host_ips = "10.0.0.0/33"`},
		{config.Admission{PodSecurity: "warn", PodSecurityDefaultLevel: "privileged"}, `admission.pod_security = "warn": must be enforce or off`},
		{config.Admission{PodSecurity: "", PodSecurityDefaultLevel: "privileged"}, `admission.pod_security = "": must be enforce or off`},
		{config.Admission{PodSecurity: "off", PodSecurityDefaultLevel: "Baseline"}, `admission.pod_security_default_level = "Baseline": must be one of privileged, baseline, restricted`},
		{config.Admission{PodSecurity: "off", PodSecurityDefaultLevel: "privileged", PodSecurityExemptNamespaces: []string{"kube system"}},
			`admission.pod_security_exempt_namespaces = "kube system"`},
	}
	for _, tt := range tests {
		if _, err := Compile(tt.rules); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Compile(%+v) = %v, want %q", tt.rules, err, tt.want)
		}
	}
	if _, err := Compile(config.DefaultAdmission()); err != nil {
		t.Errorf("defaults: %v", err)
	}
}

// nsLabels is the labels the API server said, as of now: namespace -> its
// enforce label ("-": no label); a namespace not in it is not known.
func nsLabels(enforce map[string]string) *Labels {
	now := time.Now()
	l := &Labels{Enforce: map[string]Label{}, Heard: now, MaxAge: time.Minute, At: now}
	for ns, v := range enforce {
		l.Enforce[ns] = Label{Value: v, Labelled: v != "-"}
	}
	return l
}

func TestAdmitAnnotation(t *testing.T) {
	nss := nsLabels(map[string]string{"open": "privileged", "team": "baseline", "locked": "restricted", "plain": "-", "typo": "Privileged", "kube-system": "restricted"})
	ask := []request.PortMapping{mp(hcn.TCP, 8080, "")}
	rules := func(mode, def string, exempt ...string) config.Admission {
		r := config.DefaultAdmission()
		r.PodSecurity, r.PodSecurityDefaultLevel, r.PodSecurityExemptNamespaces = mode, def, exempt
		return r
	}
	enforce := rules(config.PodSecurityEnforce, config.LevelPrivileged, "kube-system")
	tests := []struct {
		name     string
		rules    config.Admission
		ns       string
		source   *Labels
		mappings []request.PortMapping
		want     error  // nil: allowed
		says     string // a fragment of the error
	}{
		{"privileged allows", enforce, "open", nss, ask, nil, ""},
		{"baseline forbids", enforce, "team", nss, ask, ErrPodSecurity, `namespace "team" enforces "baseline" (label pod-security.kubernetes.io/enforce=baseline)`},
		{"restricted forbids", enforce, "locked", nss, ask, ErrPodSecurity, `enforces "restricted"`},
		{"the fix is named", enforce, "team", nss, ask, ErrPodSecurity, "label it pod-security.kubernetes.io/enforce=privileged"},
		{"unlabelled: the default, privileged", enforce, "plain", nss, ask, nil, ""},
		{"unlabelled: the default, baseline", rules(config.PodSecurityEnforce, config.LevelBaseline), "plain", nss, ask, ErrPodSecurity,
			`no pod-security.kubernetes.io/enforce label: admission.pod_security_default_level = "baseline"`},
		{"a label naming no level is restricted", enforce, "typo", nss, ask, ErrPodSecurity, "names no level, which Pod Security takes as restricted"},
		{"not read yet: held back", enforce, "new", nss, ask, ErrLevelUnknown, `namespace "new"`},
		{"no namespaces to read: refused, the way out named", enforce, "open", nil, ask, ErrPodSecurity, `admission.pod_security = "off"`},
		{"exempt namespace", enforce, "kube-system", nss, ask, nil, ""},
		{"unlabelled under the defaults: baseline, not granted", config.DefaultAdmission(), "plain", nss, ask, ErrPodSecurity,
			`no pod-security.kubernetes.io/enforce label: admission.pod_security_default_level = "baseline"`},
		{"off", rules(config.PodSecurityOff, config.LevelRestricted), "locked", nil, ask, nil, ""},
		{"nothing asked", enforce, "locked", nss, nil, nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Compile(tt.rules)
			if err != nil {
				t.Fatal(err)
			}
			err = p.AdmitAnnotation(Pod{Namespace: tt.ns}, tt.mappings, tt.source)
			if tt.want == nil {
				if err != nil {
					t.Fatalf("AdmitAnnotation: %v, want allowed", err)
				}
				return
			}
			if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.says) || !strings.Contains(err.Error(), request.AnnotationPortMappings) {
				t.Fatalf("AdmitAnnotation: %v, want %v saying %q and naming the annotation", err, tt.want, tt.says)
			}
			if errors.Is(err, ErrPodSecurity) == errors.Is(err, ErrLevelUnknown) {
				t.Fatalf("AdmitAnnotation: %v is both (or neither) a refusal and a wait", err)
			}
		})
	}
}

// Issue 56: a range is admitted port by port: one crossing a denied port
// or leaving the allowed ranges is refused naming that port; one inside
// them is admitted.
func TestARangeIsAdmittedPortByPort(t *testing.T) {
	web := Pod{Namespace: "shop", Labels: map[string]string{"app": "web"}}
	p, err := Compile(withoutPodSecurity(config.DefaultAdmission()))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		annotation, denied string // "": admitted
	}{
		{"20000-20999:20000-20999/udp", ""},
		{"10000-10999:10000-10999/udp", `10248:10248/udp`}, // the kubelet's ports are in the block
		{"3380-3399:3380-3399", `3389:3389/tcp`},
		{"10240-10259:10240-10259", `10248:10248/tcp`},
		{"1000-1100:1000-1100/udp", `1000:1000/udp`},
	} {
		ms, err := request.ParsePortMappings(tc.annotation, request.Limits{MaxMappings: 1024})
		if err != nil {
			t.Fatal(err)
		}
		err = p.Admit(web, ms)
		if tc.denied == "" {
			if err != nil {
				t.Errorf("%s: %v, want admitted", tc.annotation, err)
			}
			continue
		}
		var d *Denial
		if !errors.As(err, &d) || !strings.Contains(err.Error(), tc.denied) {
			t.Errorf("%s: %v, want denied naming %s", tc.annotation, err, tc.denied)
		}
	}
}
