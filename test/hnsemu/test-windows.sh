#!/usr/bin/env bash
# Runs every test package the Windows workflow runs (.github/workflows/
# windows.yml: ./config/... ./plugin/... ./hcn/... ./cmd/...) as Windows
# binaries under wine, so a test that would fail on Windows fails here
# first. hcsshim calls stub computenetwork.dll/vmcompute.dll that forward
# to the HNS emulator (-tags hnsemu adds the tests against it; on a Windows
# host the same packages run against the real HNS). A limit of wine is
# handled in the test it bites, with the reason (no AF_UNIX sockets: the
# simulator's wire tests use TCP; os.RemoveAll fails: test/testfs; no go.exe:
# the binary below stands in for go build).
set -euo pipefail
source "$(dirname "$0")/wine-env.sh"

echo "test-windows: wine $("$WINE" --version 2>/dev/null || true), emulator at $HNS_EMULATOR"
# the binary TestVersionIsStamped and TestBinaryDoesNotLinkTheClientset run
# where no Go toolchain does (cmd/nri-hcn-portmap/main_test.go pluginBinary)
GOOS=windows GOARCH=amd64 go build -ldflags "-X main.version=v9.8.7-test -X main.commit=0123456789abcdef0123456789abcdef01234567 -X main.date=2026-12-01T00:00:00Z" -o "$work/nri-hcn-portmap.exe" ./cmd/nri-hcn-portmap
export NRI_HCN_PORTMAP_EXE="Z:${work//\//\\}\\nri-hcn-portmap.exe" # wine's Z: is the Unix root
# -p 1: the packages share one emulator, so one package's injected faults,
# rule variants and HNS restarts must not hit another's calls.
GOOS=windows GOARCH=amd64 go test -p 1 -count=1 -tags hnsemu "$@" ./config/... ./plugin/... ./hcn/... ./cmd/... 2>&1 | tee "$work/test.log"
status=${PIPESTATUS[0]}
exit "$status"
