#!/usr/bin/env bash
# Stages nft and iptables (the nf_tables variant) with the shared libraries
# they load into a root directory, for `make image`'s tools layer: the
# binaries from this machine's Debian packages (nftables, iptables; installed
# with apt-get where missing, as root), their libraries and loader found with
# ldd, and the xtables extensions iptables dlopens (ldd cannot see those).
# Usage: stage-tools.sh <root-dir>
set -euo pipefail
root=${1:?usage: stage-tools.sh <root-dir>}

missing=""
command -v nft >/dev/null || missing="$missing nftables"
[ -x /usr/sbin/xtables-nft-multi ] || missing="$missing iptables"
if [ -n "$missing" ]; then
	if [ "$(id -u)" != 0 ]; then echo "stage-tools.sh: need$missing (run as root to apt-get them)" >&2; exit 1; fi
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing
fi

rm -rf "$root"
# dev, proc and sys: mount points a container runtime (or a chroot) fills.
mkdir -p "$root/usr/sbin" "$root/etc" "$root/tmp" "$root/run" "$root/dev" "$root/proc" "$root/sys"
chmod 1777 "$root/tmp"

# copy <path>: the file at its own path under root, symlinks resolved
# (library sonames are symlinks; the copy is the file itself).
copy() {
	mkdir -p "$root$(dirname "$1")"
	cp -L --preserve=mode "$1" "$root$1"
}
libs() {
	ldd "$1" | awk '/=> \//{print $3} /^\t\/.*ld-linux/{print $1}'
}

nft=$(command -v nft)
copy "$nft"
[ "$nft" = /usr/sbin/nft ] || ln -s "$nft" "$root/usr/sbin/nft"
copy /usr/sbin/xtables-nft-multi
xt=$(dirname "$(readlink -f "$(ldd /usr/sbin/xtables-nft-multi | awk '/libxtables/{print $3}')")")/xtables
mkdir -p "$root$xt"
cp --preserve=mode "$xt"/*.so "$root$xt/"
for bin in "$nft" /usr/sbin/xtables-nft-multi "$xt"/*.so; do
	for lib in $(libs "$bin"); do copy "$lib"; done
done
# The loader is asked for by its canonical path (/lib64 on amd64; Debian
# makes /lib64 a symlink into /usr/lib64 on merged-/usr systems).
for lib in $(libs /usr/sbin/xtables-nft-multi); do
	case $lib in */ld-linux*) [ -e "$root$lib" ] || copy "$lib" ;; esac
done

# What kproxy execs (portal/rules/iptables), as Debian names them for the
# nf_tables variant.
for t in iptables iptables-save iptables-restore ip6tables ip6tables-save ip6tables-restore; do
	ln -s xtables-nft-multi "$root/usr/sbin/$t"
done
# Protocol and service names nft and iptables resolve.
for f in /etc/protocols /etc/services /etc/ethertypes; do
	[ -e "$f" ] && cp "$f" "$root/etc/"
done
echo "staged nft $(nft --version | awk '{print $2}') and $(/usr/sbin/xtables-nft-multi iptables --version) in $root ($(du -sh "$root" | cut -f1))"
