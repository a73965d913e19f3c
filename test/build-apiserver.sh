#!/usr/bin/env bash
# Builds test/cmd/kube-apiserver-etcd (kube-apiserver + embedded etcd, for
# watcher/kubetest) into a cache, only if that exact build is missing, and prints
# its path on stdout (progress goes to stderr).
#
#   ${KPROXY_CACHE:-$HOME/.cache/kproxy}/kube-apiserver-etcd-<k8s version>-<hash>
#
# <hash>: first 12 hex of a sha256 over test/go.mod, test/go.sum, every .go file
# under test/cmd and the link flags, so any change to what goes into the binary
# makes a new one. A cold build takes ~12 minutes on 2 cores; concurrent callers
# wait on a lock and reuse the result; the binary appears atomically (rename).
#
#   test/build-apiserver.sh          build if missing, print the path
#   test/build-apiserver.sh --path   only print the path (built or not)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cd "$here"
GO=${GO:-go}
cache=${KPROXY_CACHE:-${HOME:-/root}/.cache/kproxy}

version=$(awk '$1 == "k8s.io/kubernetes" && $2 ~ /^v/ { print $2; exit }' go.mod)
[ -n "$version" ] || { echo "build-apiserver.sh: no k8s.io/kubernetes version in $here/go.mod" >&2; exit 1; }
minor=${version#v1.}
minor=${minor%%.*}
ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$version -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean"

hash=$({
	sha256sum go.mod go.sum
	find cmd -name '*.go' -print0 | LC_ALL=C sort -z | xargs -0 sha256sum
	printf '%s\n' "$ldflags"
} | sha256sum | cut -c1-12)
bin="$cache/kube-apiserver-etcd-$version-$hash"
if [ "${1:-}" = --path ]; then
	echo "$bin"
	exit 0
fi

if [ ! -x "$bin" ]; then
	mkdir -p "$cache"
	exec 9>"$cache/.build.lock"
	flock 9 # another build of the same cache: wait for it, then reuse its result
	if [ ! -x "$bin" ]; then
		echo "build-apiserver.sh: building $bin (cold: ~12 min on 2 cores)" >&2
		tmp=$(mktemp "$bin.tmp.XXXXXX")
		trap 'rm -f "$tmp"' EXIT
		start=$(date +%s)
		"$GO" build -trimpath -ldflags "$ldflags" -o "$tmp" ./cmd/kube-apiserver-etcd
		chmod 0755 "$tmp"
		mv -f "$tmp" "$bin"
		trap - EXIT
		echo "build-apiserver.sh: built in $(($(date +%s) - start))s, $(du -m "$bin" | cut -f1) MB" >&2
	fi
	exec 9>&-
fi
echo "$bin"
