#!/usr/bin/env bash
# Builds test/cmd/kube-control-plane (upstream's kube-scheduler and
# kube-controller-manager in one binary, for the DaemonSet rollout test in
# deploy/) into a cache, only if that exact build is missing, and prints its
# path on stdout (progress goes to stderr).
#
#   ${KPROXY_CACHE:-$HOME/.cache/kproxy}/kube-control-plane-<k8s version>-<hash>
#
# <hash>: first 12 hex of a sha256 over test/go.mod, test/go.sum, the .go files
# of test/cmd/kube-control-plane and the link flags. It takes the API server's
# build lock (build-apiserver.sh): the two share most packages, so whichever
# builds second reuses the first's compile from the Go build cache, and two
# cold builds never compete for the same cores. The binary appears atomically.
#
#   test/build-control-plane.sh          build if missing, print the path
#   test/build-control-plane.sh --path   only print the path (built or not)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cd "$here"
GO=${GO:-go}
cache=${KPROXY_CACHE:-${HOME:-/root}/.cache/kproxy}

version=$(awk '$1 == "k8s.io/kubernetes" && $2 ~ /^v/ { print $2; exit }' go.mod)
[ -n "$version" ] || { echo "build-control-plane.sh: no k8s.io/kubernetes version in $here/go.mod" >&2; exit 1; }
minor=${version#v1.}
minor=${minor%%.*}
ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$version -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean"

hash=$({
	sha256sum go.mod go.sum
	find cmd/kube-control-plane -name '*.go' -print0 | LC_ALL=C sort -z | xargs -0 sha256sum
	printf '%s\n' "$ldflags"
} | sha256sum | cut -c1-12)
bin="$cache/kube-control-plane-$version-$hash"
if [ "${1:-}" = --path ]; then
	echo "$bin"
	exit 0
fi

if [ ! -x "$bin" ]; then
	mkdir -p "$cache"
	exec 9>"$cache/.build.lock"
	flock 9 # the API server's lock too: wait for either, then reuse its compile
	if [ ! -x "$bin" ]; then
		echo "build-control-plane.sh: building $bin" >&2
		tmp=$(mktemp "$bin.tmp.XXXXXX")
		trap 'rm -f "$tmp"' EXIT
		start=$(date +%s)
		"$GO" build -trimpath -ldflags "$ldflags" -o "$tmp" ./cmd/kube-control-plane
		chmod 0755 "$tmp"
		mv -f "$tmp" "$bin"
		trap - EXIT
		echo "build-control-plane.sh: built in $(($(date +%s) - start))s, $(du -m "$bin" | cut -f1) MB" >&2
	fi
	exec 9>&-
fi
echo "$bin"
