#!/usr/bin/env bash
# Builds containerd VERSION and its runc shim into DIR/containerd-VERSION/
# (containerd, containerd-shim-runc-v2), from the module source the Go proxy
# serves. `go install ...@VERSION` refuses v1.7.x, v2.0.x and v2.1.x (their
# go.mod has exclude directives), so every version is built the same way:
# the module copied out of the module cache, its vendor directory dropped,
# `go build` in it. Already built: nothing to do.
set -euo pipefail
version=${1:?usage: containerd-build.sh VERSION DIR}
dir=${2:?usage: containerd-build.sh VERSION DIR}
out="$dir/containerd-$version"
if [ -x "$out/containerd" ] && [ -x "$out/containerd-shim-runc-v2" ]; then
	exit 0
fi
case "$version" in
v1.*) mod=github.com/containerd/containerd ;;
*) mod=github.com/containerd/containerd/v2 ;;
esac
src=$(go mod download -json "$mod@$version" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
[ -n "$src" ] || { echo "containerd-build.sh: $mod@$version: not in the module proxy" >&2; exit 1; }
work=$(mktemp -d)
trap 'chmod -R u+w "$work"; rm -rf "$work"' EXIT
cp -r "$src/." "$work/"
chmod -R u+w "$work"
rm -rf "$work/vendor"
mkdir -p "$out.tmp"
(cd "$work" && GOFLAGS=-mod=mod CGO_ENABLED=1 go build -trimpath \
	-ldflags "-s -w -X $mod/version.Version=$version" \
	-o "$out.tmp/" ./cmd/containerd ./cmd/containerd-shim-runc-v2)
rm -rf "$out"
mv "$out.tmp" "$out"
echo "containerd $version in $out"
