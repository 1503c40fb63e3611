// Building the binaries under test and finding containerd.

package harness

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// ContainerdVersion is the containerd the harness expects.
const ContainerdVersion = "v2.4.2"

// FindContainerd locates the containerd binary (see Tool).
func FindContainerd() (string, error) {
	return Tool("CONTAINERD_BIN", "containerd", fmt.Sprintf("run `make containerd`, "+
		"which does `go install github.com/containerd/containerd/v2/cmd/containerd@%s`", ContainerdVersion))
}

// Tool locates a binary a test runs: $env (the Makefile points it at what
// it built), then $GOBIN or $GOPATH/bin (where `go install` puts it),
// then $PATH. Not found, the error says where it looked and how (how:
// the make target that builds it).
func Tool(env, name, how string) (string, error) {
	cands := []string{os.Getenv(env)}
	if gobin := goEnv("GOBIN"); gobin != "" {
		cands = append(cands, filepath.Join(gobin, name))
	}
	if gopath := goEnv("GOPATH"); gopath != "" {
		cands = append(cands, filepath.Join(strings.Split(gopath, string(os.PathListSeparator))[0], "bin", name))
	}
	for _, c := range cands {
		if c == "" {
			continue
		}
		if _, err := os.Stat(c); err == nil {
			return c, nil
		}
	}
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("%s not found (looked at $%s, %s, $PATH): %s", name, env, strings.Join(cands[1:], ", "), how)
}

func goEnv(key string) string {
	out, err := exec.Command("go", "env", key).Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// ModuleRoot is the directory of this Go module.
func ModuleRoot() (string, error) {
	// Named, so that this also answers inside a module that requires this
	// one with a replace (test/bench).
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/nri-hcn-portmap/nri-hcn-portmap").Output()
	if err != nil {
		return "", fmt.Errorf("go list -m: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

// BuildPlugin builds the plugin binary into dir and returns its path.
func BuildPlugin(dir string) (string, error) {
	return BuildBinary(dir, "nri-hcn-portmap", "", "./cmd/nri-hcn-portmap")
}

// BuildBinary builds the package pkg of the module in root/module ("" for
// the root module) into dir/name.
func BuildBinary(dir, name, module, pkg string) (string, error) {
	root, err := ModuleRoot()
	if err != nil {
		return "", err
	}
	root = filepath.Join(root, module)
	bin := filepath.Join(dir, name)
	cmd := exec.Command("go", "build", "-o", bin, pkg)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building %s: %w\n%s", pkg, err, out)
	}
	return bin, nil
}
