package request

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
)

func FuzzParsePortMappings(f *testing.F) {
	for _, seed := range []string{
		"8080:80", "8080:80/udp", "10.0.0.4:8443:443/tcp", "[fd00::4]:8080:80", " 8080:80 , 9090:90/UDP ",
		`[{"containerPort":80,"hostPort":8080,"protocol":"TCP","hostIP":"10.0.0.4"}]`,
		"- containerPort: 53\n  hostPort: 5353\n  protocol: UDP\n",
		"0:80", "8080:80/sctp", "[fe80::1%eth0]:80:80", "8080:80,,", "[", "-", "[{", "::::", "1:1/tcp/udp",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, in string) {
		ms, err := ParsePortMappings(in, defaultLimits())
		if err != nil {
			if !errors.Is(err, ErrBadMapping) || !(strings.Contains(err.Error(), "entry") || errors.Is(err, ErrTooLarge)) {
				t.Fatalf("rejection %q is not a clear mapping error", err)
			}
			return
		}
		for i, m := range ms {
			if m.HostPort == 0 || m.ContainerPort == 0 || (m.Protocol != hcn.TCP && m.Protocol != hcn.UDP) {
				t.Fatalf("accepted invalid mapping %+v from %q", m, in)
			}
			for _, o := range ms[:i] {
				if Overlap(m, o) {
					t.Fatalf("accepted overlapping %v and %v from %q", m, o, in)
				}
			}
		}
	})
}

func FuzzDecodeCRIMetadata(f *testing.F) {
	if raw, err := os.ReadFile("testdata/cri-sandbox-metadata.json"); err == nil {
		f.Add(raw)
	}
	f.Add([]byte(`{"Version":"v1","Metadata":{"Config":{"port_mappings":[{"protocol":2,"container_port":1,"host_port":1}]}}}`))
	f.Add([]byte(`{"Version":"v1","Metadata":{"Config":{"metadata":{"name":"a"},"annotations":{"hcn.nri.io/port-mappings":"1:1"}}}}`))
	f.Add([]byte(`{"Version":"v2"}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		md, err := DecodeCRIMetadata(raw)
		if err != nil {
			if !errors.Is(err, ErrBadMetadata) {
				t.Fatalf("decode error %v does not wrap ErrBadMetadata", err)
			}
			return
		}
		ms, err := md.HostPorts(defaultLimits())
		if err != nil {
			if !errors.Is(err, ErrBadMapping) || !strings.Contains(err.Error(), "CRI") {
				t.Fatalf("hostPort error %v is not a clear mapping error", err)
			}
			return
		}
		for _, m := range ms {
			if m.HostPort == 0 || m.ContainerPort == 0 {
				t.Fatalf("accepted %+v", m)
			}
		}
	})
}
