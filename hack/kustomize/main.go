// Command kustomize turns the Helm chart's rendering (stdin) into the
// kustomize manifests of deploy/kustomize: what a kustomize user applies
// is the chart's, with what kustomize does better done by kustomize.
//
//   - The ConfigMap goes: its config.toml is written beside the base, whose
//     kustomization generates the ConfigMap from it (configMapGenerator: a
//     name with the content's hash, so a changed configuration rolls the
//     pods; the chart's checksum/config annotation, a constant here, goes).
//   - The ValidatingAdmissionPolicies and their bindings (Kubernetes 1.30+,
//     cluster-wide) go to a component of their own, which an overlay adds.
//   - Helm's labels go: app.kubernetes.io/managed-by is kustomize, and
//     helm.sh/chart is dropped.
//
// Usage (make manifests, hack/dist.sh):
//
//	helm template ... | go run ./hack/kustomize -out deploy/kustomize
//	helm template ... --show-only templates/cleanup.yaml | go run ./hack/kustomize -out deploy/kustomize -cleanup
//	helm template ... --set daemonset.enabled=false --set serviceNodes.enabled=true | go run ./hack/kustomize -out deploy/kustomize -service-nodes
package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"sigs.k8s.io/yaml"
)

func main() {
	out := flag.String("out", "deploy/kustomize", "the kustomize tree to write")
	cleanup := flag.Bool("cleanup", false, "the input is the cleanup DaemonSet (cleanup/nri-hcn-portmap-cleanup.yaml)")
	serviceNodes := flag.Bool("service-nodes", false, "the input is the chart for Windows service nodes alone (service-nodes/service-nodes.yaml, its ConfigMap dropped)")
	flag.Parse()
	in, err := io.ReadAll(os.Stdin)
	if err == nil {
		mode := ""
		switch {
		case *cleanup:
			mode = "cleanup"
		case *serviceNodes:
			mode = "service-nodes"
		}
		err = write(*out, in, mode)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "kustomize:", err)
		os.Exit(1)
	}
}

const header = "# Rendered from the Helm chart (deploy/helm/nri-hcn-portmap) by `make manifests`\n# (hack/kustomize); do not edit by hand.\n"

// write splits rendered into the tree at root; mode is "" (the chart's
// defaults: base, config.toml, the policies' component), "cleanup" or
// "service-nodes".
func write(root string, rendered []byte, mode string) error {
	files := map[string]*bytes.Buffer{}
	add := func(name string, doc map[string]any) error {
		b, err := yaml.Marshal(doc)
		if err != nil {
			return err
		}
		if files[name] == nil {
			files[name] = bytes.NewBufferString(header)
		}
		files[name].WriteString("---\n")
		files[name].Write(b)
		return nil
	}
	for _, raw := range strings.Split(string(rendered), "\n---\n") {
		var doc map[string]any
		if err := yaml.Unmarshal([]byte(raw), &doc); err != nil {
			return err
		}
		if doc == nil {
			continue
		}
		relabel(doc)
		kind, _ := doc["kind"].(string)
		var err error
		switch {
		case mode == "cleanup":
			err = add("cleanup/nri-hcn-portmap-cleanup.yaml", doc)
		case mode == "service-nodes" && kind == "ConfigMap": // the service reads its own file
		case mode == "service-nodes":
			err = add("service-nodes/service-nodes.yaml", doc)
		case kind == "ConfigMap":
			data, _ := doc["data"].(map[string]any)
			toml, _ := data["config.toml"].(string)
			files["base/config.toml"] = bytes.NewBufferString(toml)
		case strings.HasPrefix(kind, "ValidatingAdmissionPolicy"):
			err = add("components/admission-policies/admission-policies.yaml", doc)
		default:
			err = add("base/nri-hcn-portmap.yaml", doc)
		}
		if err != nil {
			return err
		}
	}
	for name, b := range files {
		path := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// relabel drops Helm's labels and the chart's checksum annotation, in an
// object and in its pod template.
func relabel(doc map[string]any) {
	for _, meta := range []map[string]any{field(doc, "metadata"), field(field(field(doc, "spec"), "template"), "metadata")} {
		if labels := field(meta, "labels"); labels != nil {
			delete(labels, "helm.sh/chart")
			if _, ok := labels["app.kubernetes.io/managed-by"]; ok {
				labels["app.kubernetes.io/managed-by"] = "kustomize"
			}
		}
		if ann := field(meta, "annotations"); ann != nil {
			delete(ann, "checksum/config")
			if len(ann) == 0 {
				delete(meta, "annotations")
			}
		}
	}
}

func field(m map[string]any, key string) map[string]any {
	if m == nil {
		return nil
	}
	v, _ := m[key].(map[string]any)
	return v
}
