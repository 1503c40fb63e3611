package admission

import (
	"errors"
	"strings"
	"testing"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/config"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/request"
)

// labels is Namespaces as a map: namespace -> its enforce label ("-": no
// label); a namespace not in it is not known.
type nsLabels map[string]string

func (l nsLabels) EnforceLabel(ns string) (string, bool, string) {
	v, ok := l[ns]
	if !ok {
		return "", false, "its labels have not been read from the API server yet"
	}
	return v, v != "-", ""
}

func TestAdmitAnnotation(t *testing.T) {
	nss := nsLabels{"open": "privileged", "team": "baseline", "locked": "restricted", "plain": "-", "typo": "Privileged", "kube-system": "restricted"}
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
		source   Namespaces
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
