#!/usr/bin/env bash
# Runs the Windows code (hcn's hcsshim adapter) for real on Linux: Go
# windows/amd64 test binaries under wine, hcsshim calling stub
# computenetwork.dll/vmcompute.dll that forward to the HNS emulator.
# Needs wine64 and gcc-mingw-w64-x86-64 (.ci/run installs them).
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD

WINE=${WINE:-$(command -v wine64 || echo /usr/lib/wine/wine64)}
[ -x "$WINE" ] || { echo "test-windows: wine64 not found (apt-get install wine64)" >&2; exit 1; }
CC=${CC_WIN:-x86_64-w64-mingw32-gcc}
command -v "$CC" >/dev/null || { echo "test-windows: $CC not found (apt-get install gcc-mingw-w64-x86-64)" >&2; exit 1; }

work=$(mktemp -d /tmp/hcnpm-wine-XXXXXX)
emu_pid=
cleanup() {
	[ -n "$emu_pid" ] && kill "$emu_pid" 2>/dev/null || true
	WINEPREFIX=$work/prefix wineserver -k 2>/dev/null || "${WINE%64}server" -k 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT

# the DLLs: one stub serves as computenetwork.dll and vmcompute.dll
"$CC" -shared -O2 -Wall -o "$work/hnsstub.dll" test/hnsemu/dll/hnsstub.c -lws2_32 -lole32
"$CC" -shared -O2 -Wall -o "$work/bcryptprimitives.dll" test/hnsemu/dll/bcryptprimitives.c

# a throwaway wine prefix with the DLLs in system32
export WINEPREFIX=$work/prefix WINEDEBUG=-all WINEDLLOVERRIDES="mscoree,mshtml="
"$WINE" wineboot -i >/dev/null 2>&1
sys32=$WINEPREFIX/drive_c/windows/system32
cp "$work/hnsstub.dll" "$sys32/computenetwork.dll"
cp "$work/hnsstub.dll" "$sys32/vmcompute.dll"
cp "$work/bcryptprimitives.dll" "$sys32/bcryptprimitives.dll"

# the emulator, on a free loopback port
go build -o "$work/hnsemu" ./test/hnsemu/cmd/hnsemu
"$work/hnsemu" -listen 127.0.0.1:0 >"$work/emu.addr" 2>"$work/emu.log" &
emu_pid=$!
for _ in $(seq 50); do [ -s "$work/emu.addr" ] && break; sleep 0.1; done
export HNS_EMULATOR=$(head -1 "$work/emu.addr")
[ -n "$HNS_EMULATOR" ] || { echo "test-windows: the emulator did not start" >&2; cat "$work/emu.log" >&2; exit 1; }

# go test runs windows binaries through go_windows_amd64_exec
mkdir -p "$work/bin"
cat >"$work/bin/go_windows_amd64_exec" <<WRAP
#!/bin/sh
exec "$WINE" "\$@"
WRAP
chmod +x "$work/bin/go_windows_amd64_exec"
export PATH=$work/bin:$PATH

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
