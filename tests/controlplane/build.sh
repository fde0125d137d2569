#!/usr/bin/env bash
# Builds the real Kubernetes control plane the tests run runbook against, once per machine:
# kube-apiserver, kube-controller-manager and kube-scheduler from k8s.io/kubernetes, etcd from
# go.etcd.io/etcd/server/v3 and kwok from sigs.k8s.io/kwok, each at the version its go.mod pins,
# with our kubelet endpoint in front of kwok (kwok/kubeletfront: exec as a kubelet ends it);
# and the CRDs of the Gateway API (HTTPRoute), KEDA (ScaledObject) and kwok's exec and logs, from their
# modules' sources.
#
#   tests/controlplane/build.sh           build what is missing; print the folder of the binaries
#   tests/controlplane/build.sh --where   print that folder only (the tests look there)
#
# The folder is keyed by the four go.mod/go.sum pairs and kubeletfront's source, so a changed pin builds anew beside the old
# one. RUNBOOK_CONTROLPLANE_CACHE moves the cache (default: ~/.cache/runbook/controlplane).
# A cold build took 5.5 minutes on 2 cores (modules already downloaded); a warm one does nothing.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cache="${RUNBOOK_CONTROLPLANE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/runbook/controlplane}"
key="$(cd "$here" && cat kube/go.mod kube/go.sum etcd/go.mod etcd/go.sum kwok/go.mod kwok/go.sum crds/go.mod crds/go.sum kwok/kubeletfront/*.go | sha256sum | cut -c1-16)"
bin="$cache/$key/bin"
if [ "${1:-}" = "--where" ]; then
  echo "$bin"
  exit 0
fi
command -v go >/dev/null 2>&1 || { echo "build.sh: the Go toolchain is not installed (go not on PATH)" >&2; exit 2; }
mkdir -p "$bin"

# build MODULE_DIR BINARY PACKAGE: one binary, written under a temporary name and moved into place,
# so an interrupted build never leaves a binary the tests would take for whole.
build() {
  local dir="$1" name="$2" package="$3"
  [ -x "$bin/$name" ] && return 0
  echo "build.sh: building $name ($package) ..." >&2
  local started=$SECONDS
  (cd "$here/$dir" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$bin/.$name.partial" "$package")
  mv -f "$bin/.$name.partial" "$bin/$name"
  echo "build.sh: $name built in $((SECONDS - started))s" >&2
}

build etcd etcd go.etcd.io/etcd/server/v3
build kube kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver
build kube kube-controller-manager k8s.io/kubernetes/cmd/kube-controller-manager
build kube kube-scheduler k8s.io/kubernetes/cmd/kube-scheduler
build kwok kwok sigs.k8s.io/kwok/cmd/kwok
build kwok kubeletfront ./kubeletfront

# The CRDs, as their projects publish them in their modules (served by the module proxy like the code).
crds="$cache/$key/crds"
if [ ! -f "$crds/.complete" ]; then
  mkdir -p "$crds"
  gateway="$(cd "$here/crds" && go mod download -json sigs.k8s.io/gateway-api | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')"
  keda="$(cd "$here/crds" && go mod download -json github.com/kedacore/keda/v2 | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')"
  kwok="$(cd "$here/crds" && go mod download -json sigs.k8s.io/kwok | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')"
  cp "$gateway/config/crd/standard/gateway.networking.k8s.io_httproutes.yaml" \
     "$gateway/config/crd/standard/gateway.networking.k8s.io_gateways.yaml" \
     "$gateway/config/crd/standard/gateway.networking.k8s.io_gatewayclasses.yaml" \
     "$keda/config/crd/bases/keda.sh_scaledobjects.yaml" \
     "$kwok/kustomize/crd/bases/kwok.x-k8s.io_execs.yaml" "$kwok/kustomize/crd/bases/kwok.x-k8s.io_clusterexecs.yaml" \
     "$kwok/kustomize/crd/bases/kwok.x-k8s.io_logs.yaml" "$kwok/kustomize/crd/bases/kwok.x-k8s.io_clusterlogs.yaml" \
     "$crds/"
  touch "$crds/.complete"
fi
echo "$bin"
