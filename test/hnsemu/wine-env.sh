# Sourced by test-windows.sh and e2e-windows.sh: a throwaway wine prefix
# whose computenetwork.dll and vmcompute.dll are stubs forwarding every HNS
# call over TCP to the HNS emulator, which this starts. Sets WINE, work,
# HNS_EMULATOR and HNS_SIM_ADDRESS (the same model over the simulator's wire
# API), and puts go_windows_amd64_exec on PATH so go test runs Windows
# binaries under wine. Needs wine64 and gcc-mingw-w64-x86-64 (.ci/run
# installs them).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

WINE=${WINE:-$(command -v wine64 || echo /usr/lib/wine/wine64)}
[ -x "$WINE" ] || { echo "wine-env: wine64 not found (apt-get install wine64)" >&2; exit 1; }
CC=${CC_WIN:-x86_64-w64-mingw32-gcc}
command -v "$CC" >/dev/null || { echo "wine-env: $CC not found (apt-get install gcc-mingw-w64-x86-64)" >&2; exit 1; }

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

# the emulator, on a free loopback port, and its model on a unix socket
go build -o "$work/hnsemu" ./test/hnsemu/cmd/hnsemu
export HNS_SIM_ADDRESS=unix://$work/model.sock
"$work/hnsemu" -listen 127.0.0.1:0 -sim-listen "$HNS_SIM_ADDRESS" >"$work/emu.addr" 2>"$work/emu.log" &
emu_pid=$!
for _ in $(seq 50); do [ -s "$work/emu.addr" ] && break; sleep 0.1; done
export HNS_EMULATOR=$(head -1 "$work/emu.addr")
[ -n "$HNS_EMULATOR" ] || { echo "wine-env: the emulator did not start" >&2; cat "$work/emu.log" >&2; exit 1; }

# go test runs windows binaries through go_windows_amd64_exec
mkdir -p "$work/bin"
cat >"$work/bin/go_windows_amd64_exec" <<WRAP
#!/bin/sh
exec "$WINE" "\$@"
WRAP
chmod +x "$work/bin/go_windows_amd64_exec"
export PATH=$work/bin:$PATH WINE
