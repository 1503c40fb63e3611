// Command ziplinks makes the markdown files of a release's zip read where
// they are: each relative link whose target the zip holds stays, each
// other becomes a link to that file in the repository at the release's
// tag (make dist, hack/dist.sh). A link to nothing in the repository
// either is an error.
package main

import (
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
)

func main() {
	dir := flag.String("dir", "", "the zip's files, laid out as in the repository")
	root := flag.String("root", ".", "the repository")
	base := flag.String("base", "", "the repository's web address at the release, e.g. https://github.com/OWNER/REPO (blob/TAG and tree/TAG are added)")
	tag := flag.String("tag", "", "the release's tag")
	flag.Parse()
	if err := run(*dir, *root, *base, *tag); err != nil {
		fmt.Fprintln(os.Stderr, "ziplinks:", err)
		os.Exit(1)
	}
}

// link is a markdown link's target: ](target) or ](target#fragment).
var link = regexp.MustCompile(`\]\(([^)\s#]*)(#[^)\s]*)?\)`)

func run(dir, root, base, tag string) error {
	if dir == "" || base == "" || tag == "" {
		return fmt.Errorf("-dir, -base and -tag are needed")
	}
	var errs []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || filepath.Ext(p) != ".md" {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		out := link.ReplaceAllStringFunc(string(b), func(m string) string {
			sub := link.FindStringSubmatch(m)
			target, frag := sub[1], sub[2]
			if target == "" || strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				return m
			}
			repoPath := path.Clean(path.Join(path.Dir(filepath.ToSlash(rel)), target))
			if _, err := os.Stat(filepath.Join(dir, filepath.FromSlash(repoPath))); err == nil {
				return m // in the zip
			}
			st, err := os.Stat(filepath.Join(root, filepath.FromSlash(repoPath)))
			if err != nil || strings.HasPrefix(repoPath, "../") {
				errs = append(errs, fmt.Sprintf("%s: link %s: in neither the zip nor the repository", rel, target))
				return m
			}
			kind := "blob"
			if st.IsDir() {
				kind = "tree"
			}
			return fmt.Sprintf("](%s/%s/%s/%s%s)", strings.TrimSuffix(base, "/"), kind, tag, repoPath, frag)
		})
		return os.WriteFile(p, []byte(out), 0o644)
	})
	if err != nil {
		return err
	}
	if errs != nil {
		return fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return nil
}
