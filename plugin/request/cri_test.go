package request

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
)

// testdata/cri-sandbox-metadata.json was captured from a sandbox container
// created by containerd v2.4.2's CRI (hack/capture-cri-metadata).
func TestDecodeCapturedCRIMetadata(t *testing.T) {
	raw, err := os.ReadFile("testdata/cri-sandbox-metadata.json")
	if err != nil {
		t.Fatal(err)
	}
	md, err := DecodeCRIMetadata(raw)
	if err != nil {
		t.Fatal(err)
	}
	if md.PodName != "web" || md.PodNamespace != "shop" || md.PodUID != "7d9a8c36-1f0e-4a53-9a51-2a1b5e7c9d10" {
		t.Errorf("pod identity = %q %q %q", md.PodName, md.PodNamespace, md.PodUID)
	}
	if md.Annotations[AnnotationPortMappings] != "10.0.0.4:8443:443/tcp" {
		t.Errorf("annotations = %v", md.Annotations)
	}
	want := []PortMapping{m(hcn.TCP, 8080, 80, ""), m(hcn.UDP, 5353, 53, "10.0.0.4")} // container_port 81 has no host port
	got, err := md.HostPorts(Limits{})
	if err != nil || len(got) != len(want) {
		t.Fatalf("port mappings = %v, %v; want %v", got, err, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("mapping %d = %v, want %v", i, got[i], want[i])
		}
	}
}

func TestDecodeCRIMetadataRejects(t *testing.T) {
	wrap := func(pm string) string {
		return `{"Version":"v1","Metadata":{"ID":"x","Config":{"metadata":{"name":"p","namespace":"n"},"port_mappings":[` + pm + `]}}}`
	}
	tests := []struct {
		name, in string
		is       error
		want     string
	}{
		{"not JSON", `{"Version":`, ErrBadMetadata, "unexpected end of JSON input"},
		{"wrong shape", `{"Version":"v1","Metadata":"nope"}`, ErrBadMetadata, "cannot unmarshal"},
		{"version", `{"Version":"v2","Metadata":{}}`, ErrBadMetadata, `version "v2", want v1`},
		{"no config", `{"Version":"v1","Metadata":{"ID":"x"}}`, ErrBadMetadata, "no Metadata.Config"},
		{"sctp", wrap(`{"protocol":2,"container_port":80,"host_port":80}`), ErrBadMapping, "SCTP is not supported by HNS"},
		{"unknown protocol", wrap(`{"protocol":7,"container_port":80,"host_port":80}`), ErrBadMapping, "unknown CRI protocol 7"},
		{"port range", wrap(`{"container_port":80,"host_port":70000}`), ErrBadMapping, "hostPort 70000 is outside 1-65535"},
		{"container port missing", wrap(`{"host_port":80}`), ErrBadMapping, "containerPort 0 is outside 1-65535"},
		{"bad host ip", wrap(`{"container_port":80,"host_port":80,"host_ip":"ten"}`), ErrBadMapping, `host IP "ten"`},
		{"duplicate", wrap(`{"container_port":80,"host_port":80},{"container_port":80,"host_port":80}`), ErrBadMapping, "duplicates entry"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			md, err := DecodeCRIMetadata([]byte(tt.in))
			if err == nil {
				_, err = md.HostPorts(Limits{})
			}
			if !errors.Is(err, tt.is) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want %v mentioning %q", err, tt.is, tt.want)
			}
		})
	}
}

func TestDecodeCRIMetadataSkipsHostPortZero(t *testing.T) {
	md, err := DecodeCRIMetadata([]byte(`{"Version":"v1","Metadata":{"Config":{"port_mappings":[{"container_port":81},{"protocol":1,"container_port":53}]}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := md.HostPorts(Limits{}); err != nil || len(got) != 0 {
		t.Fatalf("= %v, %v; want no mappings", got, err)
	}
}

func TestMergeMappings(t *testing.T) {
	a := m(hcn.TCP, 8080, 80, "")
	b := m(hcn.UDP, 53, 53, "")
	tests := []struct {
		name     string
		ann, cri []PortMapping
		want     int
		err      string
	}{
		{"annotation only", []PortMapping{a}, nil, 1, ""},
		{"cri only", nil, []PortMapping{a, b}, 2, ""},
		{"same from both counts once", []PortMapping{a}, []PortMapping{a, b}, 2, ""},
		{"disagree", []PortMapping{a}, []PortMapping{m(hcn.TCP, 8080, 81, "")}, 0, `conflicts with "8080:80/tcp"`},
		{"overlapping host ip", []PortMapping{m(hcn.TCP, 8080, 80, "10.0.0.4")}, []PortMapping{a}, 0, "annotation hcn.nri.io/port-mappings and Kubernetes hostPort disagree"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := MergeMappings(tt.ann, tt.cri, Limits{})
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) || !errors.Is(err, ErrBadMapping) {
					t.Fatalf("err = %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil || len(got) != tt.want {
				t.Fatalf("= %v, %v; want %d mappings", got, err, tt.want)
			}
		})
	}
}
