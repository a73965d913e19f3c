#!/usr/bin/env bash
# Builds one of the test programs under test/k8s/cmd (made from k8s.io/kubernetes)
# into a cache, only if that exact build is missing, and prints its path on
# stdout (progress goes to stderr). build-apiserver.sh and
# build-control-plane.sh name the program; this does the work.
#
#   ${KPROXY_CACHE:-$HOME/.cache/kproxy}/<name>-<k8s version>-<hash>
#
# <hash>: first 12 hex of a sha256 over test/k8s/go.mod, test/k8s/go.sum, the
# .go files of test/k8s/cmd/<name> and the link flags, so any change to what goes into the
# binary makes a new one. Every build takes one lock: the programs share most
# packages, so whichever builds second reuses the first's compile from the Go
# build cache, two cold builds never compete for the same cores, and
# concurrent callers of one program wait and reuse its result. The binary
# appears atomically (rename).
#
#   test/k8s/build-k8s-cmd.sh NAME          build if missing, print the path
#   test/k8s/build-k8s-cmd.sh NAME --path   only print the path (built or not)
#
# MODULE=node builds a program of the module in test/k8s/node (the kubelet)
# instead of test/k8s itself. PKG=importpath builds that package instead of
# ./cmd/NAME (a main package of a dependency: agnhost); TEST=./dir builds
# that directory's test binary (go test -c: the e2e suite).
set -euo pipefail

name=${1:?usage: build-k8s-cmd.sh NAME [--path]}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/${MODULE:-.}" && pwd)
cd "$here"
pkg=${PKG:-./cmd/$name}
src=cmd/$name
[ -n "${TEST:-}" ] && src=$TEST
[ -n "${PKG:-}" ] || [ -d "$src" ] || { echo "build-k8s-cmd.sh: no program $here/$src" >&2; exit 1; }
GO=${GO:-go}
cache=${KPROXY_CACHE:-${HOME:-/root}/.cache/kproxy}

# The version in the binary's name: k8s.io/kubernetes's, or with
# VERSION_OF=module (CoreDNS) that module's.
of=${VERSION_OF:-k8s.io/kubernetes}
version=$(awk -v m="$of" '($1 == m || ($1 == "require" && $2 == m)) { v = ($1 == m) ? $2 : $3; if (v ~ /^v/) { print v; exit } }' go.mod)
[ -n "$version" ] || { echo "build-k8s-cmd.sh: no $of version in $here/go.mod" >&2; exit 1; }
minor=${version#v1.}
minor=${minor%%.*}
ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$version -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean"

hash=$({
	sha256sum go.mod go.sum
	[ -d "$src" ] && find "$src" -name '*.go' -print0 | LC_ALL=C sort -z | xargs -0 sha256sum
	printf '%s\n' "$ldflags" ${PKG:-} ${TEST:-} ${CGO_ENABLED:+CGO_ENABLED=$CGO_ENABLED}
} | sha256sum | cut -c1-12)
bin="$cache/$name-$version-$hash"
if [ "${2:-}" = --path ]; then
	echo "$bin"
	exit 0
fi

if [ ! -x "$bin" ]; then
	mkdir -p "$cache"
	exec 9>"$cache/.build.lock"
	flock 9 # another build: wait for it, then reuse its result and its compile
	if [ ! -x "$bin" ]; then
		echo "build-k8s-cmd.sh: building $bin (cold: several minutes on 2 cores)" >&2
		tmp=$(mktemp "$bin.tmp.XXXXXX")
		trap 'rm -f "$tmp"' EXIT
		start=$(date +%s)
		if [ -n "${TEST:-}" ]; then
			"$GO" test -c -trimpath -ldflags "$ldflags" -o "$tmp" "$TEST"
		else
			"$GO" build -trimpath -ldflags "$ldflags" -o "$tmp" "$pkg"
		fi
		chmod 0755 "$tmp"
		mv -f "$tmp" "$bin"
		trap - EXIT
		echo "build-k8s-cmd.sh: built $name in $(($(date +%s) - start))s, $(du -m "$bin" | cut -f1) MB" >&2
	fi
	exec 9>&-
fi
echo "$bin"
