#!/usr/bin/env bash
# The product users run, nri-hcn-portmap.exe (the release build: no test
# tags), does its main job under wine: against the real Linux containerd of
# the e2e harness (through a loopback TCP relay to its socket) and HNS's
# calls answered by the emulator behind the stub DLLs. The Go tests in
# test/e2ewin drive it (build tag e2ewin keeps them out of ./test/...).
set -euo pipefail
source "$(dirname "$0")/wine-env.sh"

if [ -z "${PLUGIN_EXE:-}" ]; then # make e2e-windows passes the one make build-windows built
	GOOS=windows GOARCH=amd64 go build -o "$work/nri-hcn-portmap.exe" ./cmd/nri-hcn-portmap
	PLUGIN_EXE=$work/nri-hcn-portmap.exe
fi
export PLUGIN_EXE
echo "e2e-windows: wine $("$WINE" --version 2>/dev/null || true), emulator at $HNS_EMULATOR, model at $HNS_SIM_ADDRESS"
go test -count=1 -timeout 6m -tags e2ewin -v "$@" ./test/e2ewin/ 2>&1 | tee "$work/test.log"
status=${PIPESTATUS[0]}
exit "$status"
