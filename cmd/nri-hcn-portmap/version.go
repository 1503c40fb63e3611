package main

import (
	"cmp"
	"fmt"
	"runtime"
	"runtime/debug"
)

// What the build stamps (-ldflags "-X main.version=... -X main.commit=...
// -X main.date=..."): make build, make dist, deploy/Dockerfile. A build
// without them says what the Go toolchain recorded of the checkout.
var (
	version = "dev"
	commit  = ""
	date    = ""
)

// buildInfo is what the binary says of itself.
type buildInfo struct {
	Version, Commit, Date, Go string
}

// thisBuild is this binary's version, the commit and date it was built
// from (stamped, or the toolchain's VCS record, "-dirty" when the tree had
// changes; "unknown" when neither says) and its Go version.
func thisBuild() buildInfo {
	b := buildInfo{Version: version, Commit: commit, Date: date, Go: runtime.Version()}
	if info, ok := debug.ReadBuildInfo(); ok && b.Commit == "" {
		var rev, at string
		dirty := false
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.time":
				at = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
		if rev != "" && dirty {
			rev += "-dirty"
		}
		b.Commit, b.Date = rev, cmp.Or(b.Date, at)
	}
	b.Commit, b.Date = cmp.Or(b.Commit, "unknown"), cmp.Or(b.Date, "unknown")
	return b
}

func (b buildInfo) String() string {
	return fmt.Sprintf("nri-hcn-portmap %s (commit %s, built %s, %s)", b.Version, b.Commit, b.Date, b.Go)
}
