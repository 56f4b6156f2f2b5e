#!/bin/sh
# Runs a command that compiles an outside tool make test needs but never
# rebuilds while its inputs stay the same (kube-apiserver and etcd,
# golangci-lint), with GOCACHE set to a hard-linked copy of the Go build
# cache. The command reuses every package already compiled there (the
# standard library and the modules the tests build too), and what it adds
# goes away with the copy when it ends: the tools' own packages, over a
# gigabyte, would otherwise stay in the cache for nothing. Where the copy
# cannot be linked (another file system), the command uses the cache itself.
set -eu
cache=$(${GO:-go} env GOCACHE)
scratch="$cache.scratch.$$"
trap 'rm -rf "$scratch"' EXIT
trap 'exit 130' INT TERM
mkdir -p "$cache"
if cp -al "$cache" "$scratch" 2>/dev/null; then
	GOCACHE=$scratch "$@"
else
	rm -rf "$scratch"
	echo "scratch-gocache: cannot hard-link $cache; the build stays in it" >&2
	"$@"
fi
