package admission

import (
	"errors"
	"fmt"
	"slices"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/config"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/request"
)

// LabelEnforce is the namespace label that says its Pod Security level
// (k8s.io/pod-security-admission/api EnforceLevelLabel).
const LabelEnforce = "pod-security.kubernetes.io/enforce"

// ErrPodSecurity wraps every refusal of the annotation by the pod's
// namespace's Pod Security level: final for the pod (its namespace's
// labels are not the pod author's).
var ErrPodSecurity = errors.New("refused by the namespace's Pod Security level")

// ErrLevelUnknown: the namespace's level has not been read from the API
// server (not since the plugin started, or the namespace is newer than
// what the watch has shown). The annotation is refused until it is known:
// never granted by default.
var ErrLevelUnknown = errors.New("the namespace's Pod Security level is not known yet")

// Namespaces tells what the API server last said of a namespace's labels
// (package kube keeps it, by a watch).
type Namespaces interface {
	// EnforceLabel is the namespace's pod-security.kubernetes.io/enforce
	// label (labelled false when it has none); known is false while the
	// namespace has not been read.
	EnforceLabel(namespace string) (value string, labelled, known bool)
}

// PodSecurityError is the annotation refused by the namespace's level.
type PodSecurityError struct {
	Namespace string
	Level     string // the level in force; "" when it cannot be checked
	From      string // where the level comes from (or why it cannot be checked)
}

func (e *PodSecurityError) Error() string {
	if e.Level == "" {
		return fmt.Sprintf("annotation %s %s: it cannot be checked for namespace %q: %s",
			request.AnnotationPortMappings, ErrPodSecurity, e.Namespace, e.From)
	}
	return fmt.Sprintf("annotation %s %s: namespace %q enforces %q (%s), which forbids host ports as it forbids hostPort; "+
		"run the pod in a namespace whose level is privileged, or have the namespace's owners label it %s=privileged",
		request.AnnotationPortMappings, ErrPodSecurity, e.Namespace, e.Level, e.From, LabelEnforce)
}

func (e *PodSecurityError) Unwrap() error { return ErrPodSecurity }

// LevelUnknownError is the annotation held back while the namespace's
// level is not known.
type LevelUnknownError struct {
	Namespace string
	Why       string
}

func (e *LevelUnknownError) Error() string {
	return fmt.Sprintf("annotation %s not mapped yet: %s of namespace %q (%s); it is mapped once the level is known and allows it",
		request.AnnotationPortMappings, ErrLevelUnknown, e.Namespace, e.Why)
}

func (e *LevelUnknownError) Unwrap() error { return ErrLevelUnknown }

// PodSecurityChecked says whether the annotation obeys the namespaces'
// levels (admission.pod_security = "enforce").
func (p *Policy) PodSecurityChecked() bool { return p.podSecurity }

// AdmitAnnotation checks the mappings the pod's annotation asks for
// against its namespace's Pod Security enforce level, as the API server
// checks a hostPort before the pod exists: privileged allows them,
// baseline and restricted forbid them. A namespace without the label has
// admission.pod_security_default_level; a label that names no level is
// taken as restricted, as Pod Security takes it (ParseLevel,
// k8s.io/pod-security-admission/api/helpers.go). ns nil: the plugin cannot
// read namespaces (kubernetes.enabled = false), and the annotation is
// refused, saying how to turn the check off.
func (p *Policy) AdmitAnnotation(pod Pod, mappings []request.PortMapping, ns Namespaces) error {
	if !p.podSecurity || len(mappings) == 0 || p.exempt[pod.Namespace] {
		return nil
	}
	if ns == nil {
		return &PodSecurityError{Namespace: pod.Namespace,
			From: `kubernetes.enabled = false: the plugin cannot read namespace labels; enable [kubernetes], or set admission.pod_security = "off" where another policy engine guards the annotation`}
	}
	value, labelled, known := ns.EnforceLabel(pod.Namespace)
	if !known {
		return &LevelUnknownError{Namespace: pod.Namespace, Why: "its labels have not been read from the API server yet"}
	}
	level, from := p.defaultLevel, fmt.Sprintf("it has no %s label: admission.pod_security_default_level = %q", LabelEnforce, p.defaultLevel)
	if labelled {
		level, from = value, fmt.Sprintf("label %s=%s", LabelEnforce, value)
		if !slices.Contains(config.Levels(), value) {
			level, from = config.LevelRestricted, fmt.Sprintf("label %s=%s names no level, which Pod Security takes as restricted", LabelEnforce, value)
		}
	}
	if level == config.LevelPrivileged {
		return nil
	}
	return &PodSecurityError{Namespace: pod.Namespace, Level: level, From: from}
}
