#!/usr/bin/env bash
# Runs the Windows code (hcn's hcsshim adapter) for real on Linux: Go
# windows/amd64 test binaries under wine, hcsshim calling stub
# computenetwork.dll/vmcompute.dll that forward to the HNS emulator.
set -euo pipefail
source "$(dirname "$0")/wine-env.sh"

echo "test-windows: wine $("$WINE" --version 2>/dev/null || true), emulator at $HNS_EMULATOR"
# the adapter and the service against the emulator, and the portable
# packages whose tests run under wine as Windows binaries (the parsers, the
# admission policy, the backoff). Not config and logfile: wine's file
# deletion fails t.TempDir's cleanup, and config's tests of the simulated
# backend are Linux semantics; the windows workflow runs them on Windows.
# -p 1: the packages share one emulator, so one package's injected faults,
# rule variants and HNS restarts must not hit another's calls.
GOOS=windows GOARCH=amd64 go test -p 1 -count=1 -tags hnsemu -v "$@" ./hcn/ ./plugin/doctor/ ./cmd/nri-hcn-portmap/service/ \
	./plugin/request/ ./plugin/admission/ ./plugin/backoff/ 2>&1 | tee "$work/test.log"
status=${PIPESTATUS[0]}
exit "$status"
