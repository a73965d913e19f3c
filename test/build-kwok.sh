#!/usr/bin/env bash
# Builds kwok (sigs.k8s.io/kwok's controller: it plays the kubelet of
# simulated nodes, moving their Nodes and Pods through configured stages)
# from its Go module into a cache, only if that exact build is missing, and
# prints its path on stdout (progress goes to stderr). The DaemonSet rollout
# test in deploy/ runs it against the test API server.
#
#   ${KPROXY_CACHE:-$HOME/.cache/kproxy}/kwok-<version>
#
# `go install module@version`: kwok's go.mod has no replace directive, and its
# own go.sum pins its dependencies. The binary appears atomically.
#
#   test/build-kwok.sh          build if missing, print the path
#   test/build-kwok.sh --path   only print the path (built or not)
set -euo pipefail

GO=${GO:-go}
version=v0.8.0
cache=${KPROXY_CACHE:-${HOME:-/root}/.cache/kproxy}
bin="$cache/kwok-$version"
if [ "${1:-}" = --path ]; then
	echo "$bin"
	exit 0
fi

if [ ! -x "$bin" ]; then
	mkdir -p "$cache"
	exec 9>"$cache/.build-kwok.lock"
	flock 9 # another build of the same cache: wait for it, then reuse its result
	if [ ! -x "$bin" ]; then
		echo "build-kwok.sh: building $bin" >&2
		start=$(date +%s)
		tmp=$(mktemp -d "$bin.tmp.XXXXXX")
		trap 'rm -rf "$tmp"' EXIT
		(cd / && GOBIN="$tmp" GOFLAGS= GOTOOLCHAIN=local CGO_ENABLED=0 "$GO" install -trimpath -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@$version")
		mv -f "$tmp/kwok" "$bin"
		echo "build-kwok.sh: built in $(($(date +%s) - start))s, $(du -m "$bin" | cut -f1) MB" >&2
	fi
	exec 9>&-
fi
echo "$bin"
