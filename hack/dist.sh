#!/usr/bin/env bash
# make dist VERSION=vX.Y.Z: the release's artifacts, in dist/vX.Y.Z/ (or
# DIST_DIR), everything but the image (the release workflow builds and
# pushes it with buildx):
#   nri-hcn-portmap-vX.Y.Z-windows-amd64.zip  the .exe, stamped with the
#                                             version, commit and date
#   nri-hcn-portmap-X.Y.Z.tgz                 the chart (helm package,
#                                             version = appVersion = X.Y.Z)
#   nri-hcn-portmap-vX.Y.Z-kustomize.tar.gz   deploy/kustomize rendered from
#                                             that chart
#   alerts.yaml, dashboard.json               deploy/monitoring
#   SHA256SUMS
set -euo pipefail
cd "$(dirname "$0")/.."

version=${VERSION:?VERSION=vX.Y.Z}
if [[ ! $version =~ ^v([0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?)$ ]]; then
	echo "dist: VERSION=$version is not a release tag like v1.2.3 (or v1.2.3-rc.1)" >&2
	exit 2
fi
semver=${BASH_REMATCH[1]} # the chart's version and appVersion, the image's tag
out=${DIST_DIR:-dist/$version}
helm=${HELM:-helm}
go=${GO:-go}
commit=${COMMIT:-$(git rev-parse HEAD)}
date=${DATE:-$(git log -1 --format=%cI)}
kube_version=${KUBE_VERSION:-1.30.0}
kube_apis=${KUBE_APIS:-admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy}

rm -rf "$out"
mkdir -p "$out"
out=$(cd "$out" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# the Windows executable
mkdir -p "$work/exe"
GOOS=windows GOARCH=amd64 CGO_ENABLED=0 "$go" build -trimpath \
	-ldflags "-X main.version=$version -X main.commit=$commit -X main.date=$date" \
	-o "$work/exe/nri-hcn-portmap.exe" ./cmd/nri-hcn-portmap
# with the README and the docs it links, read where they are: a link to
# what the zip does not hold goes to the repository at the release's tag
mkdir -p "$work/exe/docs"
cp README.md LICENSE "$work/exe/"
cp docs/*.md "$work/exe/docs/"
"$go" run ./hack/ziplinks -dir "$work/exe" -root . -base https://github.com/nri-hcn-portmap/nri-hcn-portmap -tag "$version"
# entries dated the commit's time, as the tar's are: the same tree, the
# same zip
(cd "$work/exe" && TZ=UTC touch -d "$date" nri-hcn-portmap.exe README.md LICENSE docs docs/*.md &&
	TZ=UTC zip -q -X "$out/nri-hcn-portmap-$version-windows-amd64.zip" nri-hcn-portmap.exe README.md LICENSE docs/*.md)

# the chart, linted as packaged
"$helm" lint --strict deploy/helm/nri-hcn-portmap --namespace nri-hcn-portmap --kube-version "$kube_version" >/dev/null
"$helm" package deploy/helm/nri-hcn-portmap --version "$semver" --app-version "$semver" --destination "$out" >/dev/null
chart="$out/nri-hcn-portmap-$semver.tgz"
"$helm" lint --strict "$chart" --namespace nri-hcn-portmap --kube-version "$kube_version" >/dev/null

# the kustomize bundle, rendered from that chart as make manifests renders
# (hack/kustomize: the ConfigMap generated from config.toml, the admission
# policies a component of their own)
mkdir -p "$work/kustomize"
cp -r deploy/kustomize/base deploy/kustomize/cleanup deploy/kustomize/components deploy/kustomize/service-nodes "$work/kustomize/"
"$helm" template nri-hcn-portmap "$chart" --namespace nri-hcn-portmap --kube-version "$kube_version" \
	--api-versions "$kube_apis" | go run ./hack/kustomize -out "$work/kustomize"
"$helm" template nri-hcn-portmap "$chart" --namespace nri-hcn-portmap --kube-version "$kube_version" \
	--api-versions "$kube_apis" --set daemonset.enabled=false --set cleanup.enabled=true \
	--show-only templates/cleanup.yaml | go run ./hack/kustomize -out "$work/kustomize" -cleanup
"$helm" template nri-hcn-portmap "$chart" --namespace nri-hcn-portmap --kube-version "$kube_version" \
	--api-versions "$kube_apis" --set daemonset.enabled=false --set serviceNodes.enabled=true \
	| go run ./hack/kustomize -out "$work/kustomize" -service-nodes
tar -C "$work" --sort=name --owner=0 --group=0 --numeric-owner --mtime="$date" \
	-czf "$out/nri-hcn-portmap-$version-kustomize.tar.gz" kustomize

cp deploy/monitoring/alerts.yaml deploy/monitoring/dashboard.json "$out/"
(cd "$out" && sha256sum -- * > SHA256SUMS)
echo "dist: $out"
ls -1 "$out"
