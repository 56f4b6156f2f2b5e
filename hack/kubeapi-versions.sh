#!/bin/sh
# Fails when a module whose packages both the main module and test/kubeapi
# build is at different versions in the two: each would then compile its
# own copy of every package above it (see test/kubeapi/go.mod).
set -eu
export LC_ALL=C
GO=${GO:-go}
deps() { $GO list -deps -f '{{with .Module}}{{.Path}} {{.Version}}{{end}}' "$@" | sort -u; }
main=$(mktemp) kube=$(mktemp)
trap 'rm -f "$main" "$kube"' EXIT
deps ./... >"$main"
(cd test/kubeapi && deps k8s.io/kubernetes/cmd/kube-apiserver ./cmd/etcd) >"$kube"
mismatch=$(join "$main" "$kube" | awk '$2 != $3 { print "  " $1 ": " $2 " in the main module, " $3 " in test/kubeapi" }')
if [ -n "$mismatch" ]; then
	echo "test/kubeapi builds these modules at other versions than the main module; run go get MODULE@VERSION in test/kubeapi:" >&2
	echo "$mismatch" >&2
	exit 1
fi
