package deploy

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

// Issue 32: make dist VERSION=vX.Y.Z writes what a release attaches, and
// each is what it says: the .exe stamped with the version and commit, the
// chart packaged at that version (appVersion too, so its default image is
// the one the release pushes) and lint-clean, the kustomize bundle rendered
// from it, the monitoring files, and SHA-256 sums that hold. (The image
// and the pushes are the release workflow's: docs/testing.md.)
func TestDistMakesTheReleaseArtifacts(t *testing.T) {
	const version, semver, commit = "v9.8.7", "9.8.7", "fedcba9876543210fedcba9876543210fedcba98"
	out := t.TempDir()
	cmd := exec.Command("bash", "hack/dist.sh")
	cmd.Dir = "../.."
	cmd.Env = append(os.Environ(), "VERSION="+version, "DIST_DIR="+out, "HELM="+helmBin(t), "COMMIT="+commit, "DATE=2026-11-30T12:00:00Z")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("hack/dist.sh: %v\n%s", err, b)
	}
	// the sums hold, and name every artifact
	sums, err := os.ReadFile(filepath.Join(out, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"nri-hcn-portmap-" + version + "-windows-amd64.zip", "nri-hcn-portmap-" + semver + ".tgz",
		"nri-hcn-portmap-" + version + "-kustomize.tar.gz", "alerts.yaml", "dashboard.json"}
	listed := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(string(sums)), "\n") {
		sum, name, _ := strings.Cut(line, "  ")
		b, err := os.ReadFile(filepath.Join(out, name))
		if err != nil {
			t.Fatal(err)
		}
		if h := sha256.Sum256(b); hex.EncodeToString(h[:]) != sum {
			t.Errorf("SHA256SUMS: %s does not match", name)
		}
		listed[name] = true
	}
	for _, w := range want {
		if !listed[w] {
			t.Errorf("SHA256SUMS does not list %s", w)
		}
	}
	// the executable, stamped
	z, err := zip.OpenReader(filepath.Join(out, want[0]))
	if err != nil {
		t.Fatal(err)
	}
	defer z.Close()
	var exe []byte
	var names []string
	docs := map[string]string{} // the zip's markdown, by name
	for _, f := range z.File {
		names = append(names, f.Name)
		if strings.HasSuffix(f.Name, ".md") {
			r, err := f.Open()
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(r)
			r.Close()
			docs[f.Name] = string(b)
		}
		// dated the commit's time, not the build's: the same tree, the same zip
		if want := "2026-11-30T12:00:00Z"; f.Modified.UTC().Format(time.RFC3339) != want {
			t.Errorf("zip entry %s dated %s, want the commit's %s", f.Name, f.Modified.UTC().Format(time.RFC3339), want)
		}
		if f.Name == "nri-hcn-portmap.exe" {
			r, err := f.Open()
			if err != nil {
				t.Fatal(err)
			}
			exe, _ = io.ReadAll(r)
			r.Close()
		}
	}
	wantNames := []string{"nri-hcn-portmap.exe", "README.md", "LICENSE"}
	shipped, _ := filepath.Glob("../../docs/*.md")
	for _, d := range shipped {
		wantNames = append(wantNames, "docs/"+filepath.Base(d))
	}
	if strings.Join(names, " ") != strings.Join(wantNames, " ") {
		t.Errorf("the zip holds %v, want the .exe, the README, the LICENSE and the docs: %v", names, wantNames)
	}
	// issue 48: every link of the zip's README and docs reads where it is:
	// to a file of the zip, or to the repository at the release's tag
	atTag := regexp.MustCompile(`^https://github\.com/nri-hcn-portmap/nri-hcn-portmap/(blob|tree)/` + regexp.QuoteMeta(version) + `/`)
	links := 0
	for name, text := range docs {
		for _, m := range regexp.MustCompile(`\]\(([^)\s#]*)(#[^)\s]*)?\)`).FindAllStringSubmatch(text, -1) {
			target := m[1]
			switch {
			case target == "" || strings.HasPrefix(target, "mailto:"):
			case strings.Contains(target, "://"):
				if strings.Contains(target, "github.com/nri-hcn-portmap/nri-hcn-portmap/") && !strings.Contains(target, "/docs/operating.md#") && !atTag.MatchString(target) {
					t.Errorf("%s: link %s: into the repository, not at %s", name, target, version)
				}
			case !slices.Contains(names, path.Clean(path.Join(path.Dir(name), target))):
				t.Errorf("%s: link %s: the zip does not hold it", name, target)
			default:
				links++
			}
		}
	}
	if links == 0 {
		t.Error("the zip's README links to no file of the zip")
	}
	if !bytes.HasPrefix(exe, []byte("MZ")) || !bytes.Contains(exe, []byte(version)) || !bytes.Contains(exe, []byte(commit)) {
		t.Errorf("the zip's nri-hcn-portmap.exe (%d bytes) is not a Windows executable stamped %s, %s", len(exe), version, commit)
	}
	// the chart at the version, lint-clean, its image the release's
	chartTgz := filepath.Join(out, want[1])
	b, err := exec.Command(helmBin(t), "show", "chart", chartTgz).Output()
	if err != nil {
		t.Fatal(err)
	}
	var meta struct{ Version, AppVersion string }
	if err := yaml.Unmarshal(b, &meta); err != nil || meta.Version != semver || meta.AppVersion != semver {
		t.Errorf("packaged chart %+v (%v), want version and appVersion %s", meta, err, semver)
	}
	if b, err := exec.Command(helmBin(t), "lint", "--strict", chartTgz, "--namespace", "nri-hcn-portmap", "--kube-version", kubeVersion).CombinedOutput(); err != nil {
		t.Errorf("helm lint --strict: %v\n%s", err, b)
	}
	rendered, err := exec.Command(helmBin(t), "template", "x", chartTgz, "--namespace", "nri-hcn-portmap", "--kube-version", kubeVersion).Output()
	if err != nil {
		t.Fatal(err)
	}
	image := "ghcr.io/nri-hcn-portmap/nri-hcn-portmap:" + semver
	if ds := decodeAll(t, rendered).daemonSets; len(ds) != 1 || ds[0].Spec.Template.Spec.Containers[0].Image != image {
		t.Errorf("the packaged chart's image: %+v, want %s", ds, image)
	}
	// the kustomize bundle renders the same image
	dir := t.TempDir()
	untar(t, filepath.Join(out, want[2]), dir)
	if ds := decodeAll(t, kustomizeBuild(t, filepath.Join(dir, "kustomize", "base"))).daemonSets; len(ds) != 1 ||
		ds[0].Spec.Template.Spec.Containers[0].Image != image {
		t.Errorf("the kustomize bundle's image: %+v, want %s", ds, image)
	}
	// a version that is not a release tag is refused, naming it
	bad := exec.Command("bash", "hack/dist.sh")
	bad.Dir = "../.."
	bad.Env = append(os.Environ(), "VERSION=0.1", "DIST_DIR="+t.TempDir(), "HELM="+helmBin(t))
	if b, err := bad.CombinedOutput(); err == nil || !strings.Contains(string(b), "VERSION=0.1 is not a release tag") {
		t.Errorf("dist with VERSION=0.1: %v\n%s", err, b)
	}
}

func untar(t *testing.T, file, dir string) {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, h.Name)
		if h.Typeflag == tar.TypeDir {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
