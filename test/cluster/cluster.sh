#!/usr/bin/env bash
# A Kubernetes cluster from parts on this machine, for Kubernetes' own e2e
# tests against kproxy: the API server and control plane make test builds,
# and nodes that are network namespaces, each with its own containerd (from
# Debian) and kubelet (test/k8s/node), pods on a CNI bridge per node with routes
# between nodes. No registry: every image is built here and imported.
#
#   test/cluster/cluster.sh up      build what is missing, start the cluster
#   test/cluster/cluster.sh smoke   a real pod served through kproxy (below)
#   test/cluster/cluster.sh rollout the node proxy rolled, undone, reconfigured and killed under load (below)
#   test/cluster/cluster.sh swap    kube-proxy swapped for kproxy and back under load (PROXY=kube-proxy; below)
#   test/cluster/cluster.sh e2e     Kubernetes' network e2e tests against it (below)
#   test/cluster/cluster.sh report  the last e2e run, a line per spec
#   test/cluster/cluster.sh compare KPROXY.json KUBE-PROXY.json   (below)
#   test/cluster/cluster.sh table [DIR]   make e2e's reports as a Markdown table
#   test/cluster/cluster.sh storm   e2e with kproxy chaos crashing actors on every node (below)
#   test/cluster/cluster.sh dualstack  the [Feature:IPv6DualStack] specs (a dual-stack cluster; below)
#   test/cluster/cluster.sh nodecidr   the terminating-fallback spec under detectLocalMode NodeCIDR (CAPTURE=1: a capture under ClusterCIDR first; below)
#   test/cluster/cluster.sh conformance   the [Conformance] specs of the suite, for CI (below)
#   test/cluster/cluster.sh all     what make e2e runs (below)
#   test/cluster/cluster.sh down    stop it and remove everything it made
#   test/cluster/cluster.sh env     print KUBECONFIG=... for kubectl and tests
#
# As root. Addresses stay in 198.19.0.0/16 (inside the documentation range
# 198.18.0.0/15): the host's bridge kpc0 198.19.255.1/24, node N at
# 198.19.255.1N with pods in 198.19.N.0/24, services in 198.19.128.0/20.
# KPROXY_CLUSTER_IPFAMILY=dual (at up, and for every command after) makes
# it dual-stack, IPv4 first, in 2001:db8::/32: the bridge 2001:db8:1a::1/64,
# node N at 2001:db8:1a::1N, its pods in 2001:db8:19:N::/64, services in
# 2001:db8:1b::/112; nodes, pods and services get both families.
# The host does not forward (nothing a node sends leaves the machine);
# service addresses are routed to the host, which drops what no node proxy
# took. State in $KPROXY_CLUSTER_DIR (default /tmp/kproxy-cluster).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
S=${KPROXY_CLUSTER_DIR:-/tmp/kproxy-cluster}
# Two nodes; make e2e runs three, each a zone of its own, for the
# topology and traffic-distribution specs.
NODES=${KPROXY_CLUSTER_NODES:-2}
BRIDGE=kpc0
HOST_IP=198.19.255.1
SERVICE_CIDR=198.19.128.0/20
CLUSTER_CIDR=198.19.0.0/17
DNS_IP=198.19.128.10
HOST_IP6=2001:db8:1a::1
SERVICE_CIDR6=2001:db8:1b::/112
CLUSTER_CIDR6=2001:db8:19::/48
IPFAMILY=${KPROXY_CLUSTER_IPFAMILY:-ipv4}
case "$IPFAMILY" in ipv4 | dual) ;; *) echo "cluster.sh: KPROXY_CLUSTER_IPFAMILY is ipv4 or dual, not $IPFAMILY" >&2; exit 2 ;; esac
APISERVER_PORT=6443
PAUSE_IMAGE=registry.k8s.io/pause:3.10.2
# The node proxy: kproxy from deploy/, or the reference, kube-proxy.
PROXY=${PROXY:-kproxy}

log() { echo "cluster.sh: $*" >&2; }

node_name() { echo "node-$1"; }
node_ip() { echo "198.19.255.1$1"; }
node_ns() { echo "kpc-node-$1"; }
pod_cidr() { echo "198.19.$1.0/24"; }
node_ip6() { echo "2001:db8:1a::1$1"; }
pod_cidr6() { echo "2001:db8:19:$1::/64"; }
dual() { [ "$IPFAMILY" = dual ]; }
# both V4 V6: V4, or "V4,V6" on a dual-stack cluster (the flags' lists).
both() { if dual; then echo "$1,$2"; else echo "$1"; fi; }
SERVICE_CIDRS=$(both "$SERVICE_CIDR" "$SERVICE_CIDR6")
CLUSTER_CIDRS=$(both "$CLUSTER_CIDR" "$CLUSTER_CIDR6")

kubectl_() { "$S/bin/kubectl" --kubeconfig "$S/admin.kubeconfig" "$@"; }

need_packages() {
	local missing=""
	command -v containerd >/dev/null || missing="$missing containerd"
	command -v runc >/dev/null || missing="$missing runc"
	[ -x /usr/lib/cni/bridge ] || missing="$missing containernetworking-plugins"
	command -v umoci >/dev/null || missing="$missing umoci"
	command -v skopeo >/dev/null || missing="$missing skopeo"
	command -v nsenter >/dev/null || missing="$missing util-linux"
	# The tools the agnhost image carries (the e2e tests exec them).
	command -v busybox >/dev/null || missing="$missing busybox-static"
	command -v nc >/dev/null || missing="$missing netcat-openbsd"
	command -v dig >/dev/null || missing="$missing dnsutils"
	command -v conntrack >/dev/null || missing="$missing conntrack"
	command -v jq >/dev/null || missing="$missing jq" # the reports
	command -v wget >/dev/null || missing="$missing wget"
	command -v curl >/dev/null || missing="$missing curl"
	command -v tcpdump >/dev/null || missing="$missing tcpdump" # nodecidr's capture
	if [ -n "$missing" ]; then
		log "installing$missing"
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing
	fi
}

build() {
	mkdir -p "$S/bin"
	APISERVER=$("$root/test/build-apiserver.sh")
	CONTROL_PLANE=$("$root/test/build-control-plane.sh")
	KUBELET=$(MODULE=node "$root/test/k8s/build-k8s-cmd.sh" kubelet)
	# Small static programs for images and for the harness itself.
	local src="$S/src"
	mkdir -p "$src/pause" "$src/hostname"
	cat >"$src/pause/main.go" <<-'EOF'
		// pause holds a pod's namespaces until it is told to stop.
		package main

		import (
			"os"
			"os/signal"
			"syscall"
		)

		func main() {
			c := make(chan os.Signal, 1)
			signal.Notify(c, syscall.SIGTERM, syscall.SIGINT)
			<-c
		}
	EOF
	cat >"$src/hostname/main.go" <<-'EOF'
		// hostname answers every HTTP request with the pod's hostname on
		// :8080; "hostname get URL..." is its client: it prints each
		// answer, or the error, a line per URL.
		package main

		import (
			"fmt"
			"io"
			"net/http"
			"os"
			"strings"
			"time"
		)

		func main() {
			if len(os.Args) > 1 && os.Args[1] == "get" {
				c := http.Client{Timeout: 3 * time.Second}
				for _, u := range os.Args[2:] {
					resp, err := c.Get(u)
					if err != nil {
						fmt.Printf("%s error: %v\n", u, err)
						continue
					}
					b, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					fmt.Printf("%s %s\n", u, strings.TrimSpace(string(b)))
				}
				return
			}
			name, _ := os.Hostname()
			http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, name) })
			http.ListenAndServe(":8080", nil)
		}
	EOF
	for p in pause hostname; do
		[ -f "$src/$p/go.mod" ] || (cd "$src/$p" && go mod init "kproxycluster/$p" >/dev/null 2>&1)
		(cd "$src/$p" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$S/bin/$p" .)
	done
	# The rollout check's backend and clients (rollout below).
	(cd "$root" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$S/bin/rolloutload" ./test/cluster/rolloutload)
	ln -sf "$(MODULE=node "$root/test/k8s/build-k8s-cmd.sh" kubectl)" "$S/bin/kubectl"
	# Static, for images without a libc.
	AGNHOST=$(CGO_ENABLED=0 MODULE=node "$root/test/k8s/build-k8s-cmd.sh" agnhost)
	COREDNS=$(CGO_ENABLED=0 MODULE=coredns VERSION_OF=github.com/coredns/coredns "$root/test/k8s/build-k8s-cmd.sh" coredns)
	KUBE_PROXY=$(CGO_ENABLED=0 MODULE=node "$root/test/k8s/build-k8s-cmd.sh" kube-proxy)
	REGRESSION_74839=$(CGO_ENABLED=0 MODULE=node PKG=k8s.io/kubernetes/test/images/regression-issue-74839 "$root/test/k8s/build-k8s-cmd.sh" regression-issue-74839)
	ln -sf "$(MODULE=node TEST=./e2e "$root/test/k8s/build-k8s-cmd.sh" e2e-network)" "$S/bin/e2e-network.test"
	ln -sf "$(MODULE=node PKG=github.com/onsi/ginkgo/v2/ginkgo "$root/test/k8s/build-k8s-cmd.sh" ginkgo)" "$S/bin/ginkgo"
}

# image NAME BINARY TARGET [TOOLS...]: an image holding one static binary
# at /TARGET, its entrypoint, as a docker-archive $S/images/<file>.tar named
# NAME. TOOLS are the host's programs to copy in with the libraries they
# load; busybox among them also gets its applets (sh, ...) in /bin.
# $IMAGE_FILES: more files, "SRC:DST ...", DST relative to the root.
image() {
	local name=$1 bin=$2 target=$3 d r
	shift 3
	d=$(mktemp -d "$S/images/.build.XXXXXX")
	umoci init --layout "$d/layout" >/dev/null
	umoci new --image "$d/layout:img" >/dev/null
	umoci unpack --image "$d/layout:img" "$d/bundle" >/dev/null
	r="$d/bundle/rootfs"
	install -m 0755 "$bin" "$r/$target"
	local tool path lib
	for tool in "$@"; do
		path=$(command -v "$tool")
		path=$(readlink -f "$path")
		install -D -m 0755 "$path" "$r/usr/bin/$tool"
		for lib in $(ldd "$path" 2>/dev/null | grep -o '/[^ ]*'); do
			[ -e "$r$lib" ] || install -D -m 0755 "$(readlink -f "$lib")" "$r$lib"
		done
	done
	local f
	for f in ${IMAGE_FILES:-}; do # SRC:DST
		install -D -m "$(stat -c %a "${f%%:*}")" "${f%%:*}" "$r/${f#*:}"
	done
	if [ -x "$r/usr/bin/busybox" ]; then
		mkdir -p "$r/bin" "$r/tmp" "$r/etc"
		for a in $("$r/usr/bin/busybox" --list); do
			[ -e "$r/bin/$a" ] || [ -e "$r/usr/bin/$a" ] || ln -s /usr/bin/busybox "$r/bin/$a"
		done
		# Debian's busybox-static runs its own applets before PATH
		# (nc, wget): where bash is there, it is sh.
		[ -x "$r/usr/bin/bash" ] && ln -sf /usr/bin/bash "$r/bin/sh"
		chmod 1777 "$r/tmp"
		echo "root:x:0:0:root:/root:/bin/sh" >"$r/etc/passwd"
		echo "root:x:0:" >"$r/etc/group"
	fi
	umoci repack --image "$d/layout:img" "$d/bundle" >/dev/null
	umoci config --image "$d/layout:img" --config.entrypoint "/$target" ${IMAGE_CMD:+--config.cmd "$IMAGE_CMD"} \
		--config.env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin >/dev/null
	local out="$S/images/$(echo "$name" | tr '/:' '__').tar"
	rm -f "$out"
	skopeo copy --quiet "oci:$d/layout:img" "docker-archive:$out:$name"
	rm -rf "$d"
	echo "$out"
}

images() {
	mkdir -p "$S/images"
	# agnhost's image carries porter's TLS test certificate and CoreDNS
	# (a spec runs it as /coredns). kube-proxy's carries /etc/protocols, as
	# its upstream image (netbase) does: without it nft lists protocols as
	# numbers, kube-proxy takes the map elements it reads back at start for
	# others than those it adds, and deletes them: every second start of
	# kube-proxy left the services without rules.
	local porter
	porter=$(cd "$root/test/k8s/node" && go list -m -f '{{.Dir}}' k8s.io/kubernetes)/test/images/agnhost/porter
	IMAGES=("$(image "$PAUSE_IMAGE" "$S/bin/pause" pause)" "$(image kproxy.test/hostname:1 "$S/bin/hostname" hostname)"
		"$(image kproxy.test/rolloutload:1 "$S/bin/rolloutload" rolloutload)"
		"$(IMAGE_CMD=pause IMAGE_FILES="$porter/localhost.crt:localhost.crt $porter/localhost.key:localhost.key $COREDNS:coredns" \
			image registry.k8s.io/e2e-test-images/agnhost:2.63.0 "$AGNHOST" agnhost busybox bash curl nc dig getent ip ss conntrack wget)"
		"$(IMAGE_CMD=sh image registry.k8s.io/e2e-test-images/busybox:1.37.0-1 "$(command -v busybox)" busybox-entry busybox)"
		"$(image kproxy.test/coredns:1 "$COREDNS" coredns)"
		"$(image registry.k8s.io/e2e-test-images/glibc-dns-testing:2.0.0 "$COREDNS" coredns busybox bash dig getent)"
		"$(image registry.k8s.io/build-image/distroless-iptables:v0.9.6 "$(command -v busybox)" busybox-entry busybox conntrack)"
		"$(image registry.k8s.io/e2e-test-images/regression-issue-74839:1.4 "$REGRESSION_74839" regression-issue-74839)"
		"$(IMAGE_FILES="/etc/protocols:etc/protocols /etc/services:etc/services" image kproxy.test/kube-proxy:1 "$KUBE_PROXY" kube-proxy nft iptables ip6tables iptables-save iptables-restore ip6tables-save ip6tables-restore)")
	(cd "$root" && make -s image >/dev/null)
	rm -f "$S/images/kproxy.tar"
	skopeo copy --quiet "oci-archive:$root/bin/kproxy-image.oci.tar" "docker-archive:$S/images/kproxy.tar:kproxy:latest"
	IMAGES+=("$S/images/kproxy.tar")
}

network() {
	ip link add "$BRIDGE" type bridge 2>/dev/null || true
	ip addr replace "$HOST_IP/24" dev "$BRIDGE"
	ip link set "$BRIDGE" up
	# What no node proxy took dies here, never leaves the machine.
	ip route replace blackhole "$SERVICE_CIDR"
	if dual; then
		ip addr replace "$HOST_IP6/64" dev "$BRIDGE" nodad
		ip -6 route replace blackhole "$SERVICE_CIDR6"
	fi
	for i in $(seq 1 "$NODES"); do
		local ns; ns=$(node_ns "$i")
		ip netns add "$ns"
		ip link add "kpcv$i" type veth peer name eth0 netns "$ns"
		ip link set "kpcv$i" master "$BRIDGE" up
		ip -n "$ns" link set lo up
		ip -n "$ns" link set eth0 up
		ip -n "$ns" addr add "$(node_ip "$i")/24" dev eth0
		ip -n "$ns" route add "$SERVICE_CIDR" via "$HOST_IP"
		# A default route, as nodes have: a Service may take its address
		# from a ServiceCIDR added later (the e2e suite adds
		# 203.0.113.0/24), and the node's own processes reach it only
		# with a route. The host forwards nothing, so nothing leaves.
		ip -n "$ns" route add default via "$HOST_IP"
		ip netns exec "$ns" sysctl -qw net.ipv4.ip_forward=1 net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.default.rp_filter=0
		ip route replace "$(pod_cidr "$i")" via "$(node_ip "$i")"
		for j in $(seq 1 "$NODES"); do
			[ "$i" = "$j" ] || ip -n "$ns" route add "$(pod_cidr "$j")" via "$(node_ip "$j")"
		done
		if dual; then network6 "$i"; fi
	done
}

# network6 N: node N's IPv6 side, as network gives its IPv4 one. No
# duplicate address detection: an address is usable at once, as on a
# node whose network is up before its kubelet.
network6() {
	local i=$1 j ns; ns=$(node_ns "$i")
	ip netns exec "$ns" sysctl -qw net.ipv6.conf.all.disable_ipv6=0 net.ipv6.conf.default.disable_ipv6=0 \
		net.ipv6.conf.all.accept_dad=0 net.ipv6.conf.default.accept_dad=0 net.ipv6.conf.all.forwarding=1
	ip -n "$ns" addr add "$(node_ip6 "$i")/64" dev eth0 nodad
	ip -n "$ns" -6 route add "$SERVICE_CIDR6" via "$HOST_IP6"
	ip -n "$ns" -6 route add default via "$HOST_IP6"
	ip -6 route replace "$(pod_cidr6 "$i")" via "$(node_ip6 "$i")"
	for j in $(seq 1 "$NODES"); do
		[ "$i" = "$j" ] || ip -n "$ns" -6 route add "$(pod_cidr6 "$j")" via "$(node_ip6 "$j")"
	done
}

kubeconfig() { # FILE USER TOKEN
	cat >"$1" <<-EOF
		apiVersion: v1
		kind: Config
		clusters: [{name: c, cluster: {server: "https://$HOST_IP:$APISERVER_PORT", certificate-authority: "$S/apiserver/data/certs/apiserver.crt"}}]
		users: [{name: $2, user: {token: "$3"}}]
		contexts: [{name: c, context: {cluster: c, user: $2}}]
		current-context: c
	EOF
}

start() { # NAME CMD... : runs CMD in the background, its log and pid in $S/run
	local name=$1; shift
	mkdir -p "$S/run"
	"$@" >"$S/run/$name.log" 2>&1 &
	echo $! >"$S/run/$name.pid"
}

control_plane() {
	mkdir -p "$S/apiserver"
	local admin; admin=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
	{
		echo "$admin,admin,admin,\"system:masters\""
		for i in $(seq 1 "$NODES"); do
			echo "$admin-$i,system:node:$(node_name "$i"),node-$i,\"system:nodes,system:masters\""
		done
	} >"$S/apiserver/tokens.csv"
	chmod 0600 "$S/apiserver/tokens.csv"
	echo "$admin" >"$S/apiserver/admin-token"
	start apiserver "$APISERVER" --data-dir "$S/apiserver/data" --secure-port "$APISERVER_PORT" \
		--token-auth-file "$S/apiserver/tokens.csv" --service-cluster-ip-range "$SERVICE_CIDRS" -- \
		--bind-address="$HOST_IP" --advertise-address="$HOST_IP" --endpoint-reconciler-type=lease \
		--allow-privileged=true --kubelet-preferred-address-types=InternalIP,Hostname
	kubeconfig "$S/admin.kubeconfig" admin "$admin"
	for _ in $(seq 1 120); do
		[ -f "$S/apiserver/data/certs/apiserver.crt" ] && kubectl_ get --raw /readyz >/dev/null 2>&1 && break
		sleep 0.5
	done
	kubectl_ get --raw /readyz >/dev/null || { log "the API server is not ready"; tail -20 "$S/run/apiserver.log" >&2; exit 1; }
	start controller-manager "$CONTROL_PLANE" kube-controller-manager --kubeconfig "$S/admin.kubeconfig" \
		--service-account-private-key-file "$S/apiserver/data/sa.key" --root-ca-file "$S/apiserver/data/certs/apiserver.crt" \
		--use-service-account-credentials --cluster-cidr "$CLUSTER_CIDRS" --service-cluster-ip-range "$SERVICE_CIDRS" \
		--allocate-node-cidrs=false --leader-elect=false --bind-address 127.0.0.1 --secure-port 0
	start scheduler "$CONTROL_PLANE" kube-scheduler --kubeconfig "$S/admin.kubeconfig" --leader-elect=false \
		--bind-address 127.0.0.1 --secure-port 0
}

node() { # N
	local i=$1 n ns d sock
	n=$(node_name "$i"); ns=$(node_ns "$i"); d="$S/nodes/$n"
	sock="$d/containerd/containerd.sock"
	mkdir -p "$d/containerd" "$d/cni" "$d/kubelet"
	cat >"$d/containerd/config.toml" <<-EOF
		version = 2
		root = "$d/containerd/root"
		state = "$d/containerd/state"
		[grpc]
		  address = "$sock"
		[plugins."io.containerd.grpc.v1.cri"]
		  sandbox_image = "$PAUSE_IMAGE"
		  restrict_oom_score_adj = true
		  disable_apparmor = true
		  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
		    runtime_type = "io.containerd.runc.v2"
		    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
		      SystemdCgroup = false
		      Root = "$d/runc"
		  [plugins."io.containerd.grpc.v1.cri".cni]
		    bin_dir = "/usr/lib/cni"
		    conf_dir = "$d/cni"
	EOF
	local ranges routes
	ranges="[{\"subnet\": \"$(pod_cidr "$i")\"}]" routes='{"dst": "0.0.0.0/0"}'
	if dual; then
		ranges="$ranges, [{\"subnet\": \"$(pod_cidr6 "$i")\"}]" routes="$routes, {\"dst\": \"::/0\"}"
	fi
	cat >"$d/cni/10-bridge.conflist" <<-EOF
		{"cniVersion": "0.4.0", "name": "kpc", "plugins": [
		  {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false, "hairpinMode": true,
		   "ipam": {"type": "host-local", "dataDir": "$d/ipam", "ranges": [$ranges], "routes": [$routes]}},
		  {"type": "portmap", "capabilities": {"portMappings": true}}
		]}
	EOF
	node_mounts "$i"
	# containerd in the node's network and mount namespaces and a UTS
	# namespace of its own named after the node (host-network pods report
	# it); the kubelet shares the mount namespace, so containerd sees its
	# volume mounts.
	start "containerd-$n" unshare --uts sh -c "hostname $n && exec nsenter --mount=$(node_mnt "$i") --net=/var/run/netns/$ns containerd --config $d/containerd/config.toml"
	for _ in $(seq 1 100); do [ -S "$sock" ] && break; sleep 0.1; done
	for img in "${IMAGES[@]}"; do
		ctr --address "$sock" -n k8s.io images import --no-unpack=false "$img" >/dev/null
	done
	for c in /sys/fs/cgroup/*/; do
		[ "$c" = /sys/fs/cgroup/unified/ ] || mkdir -p "$c/kproxy-$n"
	done
	echo "nameserver $DNS_IP" >"$d/resolv.conf"
	kubeconfig "$d/kubelet/kubeconfig" "system:node:$n" "$(cat "$S/apiserver/admin-token")-$i"
	cat >"$d/kubelet/config.yaml" <<-EOF
		apiVersion: kubelet.config.k8s.io/v1beta1
		kind: KubeletConfiguration
		failCgroupV1: false
		cgroupDriver: cgroupfs
		cgroupRoot: /kproxy-$n
		containerRuntimeEndpoint: unix://$sock
		address: $(node_ip "$i")
		authentication: {anonymous: {enabled: true}, webhook: {enabled: false}}
		authorization: {mode: AlwaysAllow}
		clusterDNS: [$DNS_IP]
		clusterDomain: cluster.local
		resolvConf: $d/resolv.conf
		failSwapOn: false
		oomScoreAdj: 0
		readOnlyPort: 0
		makeIPTablesUtilChains: false
		evictionHard: {memory.available: 1Mi, nodefs.available: 1%, imagefs.available: 1%, nodefs.inodesFree: 1%}
		imageGCHighThresholdPercent: 100
		imageGCLowThresholdPercent: 99
		serializeImagePulls: false
		podCIDR: $(pod_cidr "$i")
		# Each kubelet removes the pod log directories of pods it does not
		# run: the nodes must not share the default /var/log/pods.
		podLogsDir: $d/kubelet/pod-logs
	EOF
	start "kubelet-$n" nsenter --mount="$(node_mnt "$i")" --net="/var/run/netns/$ns" "$KUBELET" --config "$d/kubelet/config.yaml" \
		--kubeconfig "$d/kubelet/kubeconfig" --hostname-override "$n" --node-ip "$(both "$(node_ip "$i")" "$(node_ip6 "$i")")" \
		--root-dir "$d/kubelet/root" --cert-dir "$d/kubelet/pki" --node-labels "topology.kubernetes.io/zone=zone-$i"
}

# The host paths node proxies' DaemonSets mount read-write, each a
# node's own on a real node: kproxy's proxy ports (/run/kproxy) and the
# iptables lock (/run/xtables.lock). /lib/modules is mounted read-only
# and stays the host's.
NODE_PATHS="/run/kproxy /run/xtables.lock"

# node_mounts N: node N's mount namespace, held by a process of its own:
# the host's, with each of $NODE_PATHS bound to the node's directory
# (slave propagation: the host's mounts show in it, the node's stay its
# own, as the kubelet's volume mounts and containerd's pod sandboxes).
node_mounts() {
	local i=$1 n d p binds=""
	n=$(node_name "$i"); d="$S/nodes/$n/host"
	for p in $NODE_PATHS; do
		# The mount point on the host, made (and removed at down) if missing.
		if [ ! -e "$p" ]; then
			case "$p" in */xtables.lock) : >"$p" ;; *) mkdir -p "$p" ;; esac
			echo "$p" >>"$S/made-host-paths"
		fi
		if [ -d "$p" ]; then mkdir -p "$d$p"; else mkdir -p "$(dirname "$d$p")" && : >"$d$p"; fi
		binds="$binds mount --bind $d$p $p &&"
	done
	rm -f "$d/.mounted"
	start "mounts-$n" unshare --mount --propagation slave sh -c "$binds touch $d/.mounted && exec sleep infinity"
	for _ in $(seq 1 100); do [ -e "$d/.mounted" ] && break; sleep 0.05; done
	[ -e "$d/.mounted" ] || { log "$n: its mount namespace did not start"; cat "$S/run/mounts-$n.log" >&2; return 1; }
}

# node_mnt N: the path of node N's mount namespace.
node_mnt() { echo "/proc/$(cat "$S/run/mounts-$(node_name "$1").pid")/ns/mnt"; }

kproxy_daemonset() {
	# As a user installs it: deploy/'s manifests, the API server's address
	# and the cluster CIDR set in the ConfigMap, the image make image built;
	# nf_conntrack_max left alone, as for kube-proxy below (it is the
	# machine's, and the nodes share it).
	kubectl_ apply -f "$root/deploy/rbac.yaml" >/dev/null
	sed -e "s#server: .*#server: https://$HOST_IP:$APISERVER_PORT#" \
		-e "s#^    mode: nftables#    mode: nftables\n    clusterCIDR: $CLUSTER_CIDRS\n    conntrack: {maxPerCore: 0}#" "$root/deploy/configmap.yaml" | kubectl_ apply -f - >/dev/null
	kubectl_ apply -f "$root/deploy/daemonset.yaml" >/dev/null
}

# dns: CoreDNS behind the kube-dns Service, as clusters run it (the e2e
# tests reach services by name).
dns() {
	kubectl_ apply -f - >/dev/null <<-EOF
		apiVersion: v1
		kind: ServiceAccount
		metadata: {name: coredns, namespace: kube-system}
		---
		apiVersion: rbac.authorization.k8s.io/v1
		kind: ClusterRole
		metadata: {name: "system:coredns"}
		rules:
		- {apiGroups: [""], resources: [endpoints, services, pods, namespaces], verbs: [list, watch]}
		- {apiGroups: [discovery.k8s.io], resources: [endpointslices], verbs: [list, watch]}
		---
		apiVersion: rbac.authorization.k8s.io/v1
		kind: ClusterRoleBinding
		metadata: {name: "system:coredns"}
		roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "system:coredns"}
		subjects: [{kind: ServiceAccount, name: coredns, namespace: kube-system}]
		---
		apiVersion: v1
		kind: ConfigMap
		metadata: {name: coredns, namespace: kube-system}
		data:
		  Corefile: |
		    .:53 {
		        errors
		        health :8080
		        ready :8181
		        kubernetes cluster.local in-addr.arpa ip6.arpa {
		            pods insecure
		            fallthrough in-addr.arpa ip6.arpa
		        }
		        cache 30
		        loadbalance
		    }
		---
		apiVersion: apps/v1
		kind: Deployment
		metadata: {name: coredns, namespace: kube-system, labels: {k8s-app: kube-dns}}
		spec:
		  replicas: 1
		  selector: {matchLabels: {k8s-app: kube-dns}}
		  template:
		    metadata: {labels: {k8s-app: kube-dns}}
		    spec:
		      serviceAccountName: coredns
		      dnsPolicy: Default
		      containers:
		      - name: coredns
		        image: kproxy.test/coredns:1
		        imagePullPolicy: Never
		        args: [-conf, /etc/coredns/Corefile]
		        ports: [{containerPort: 53, protocol: UDP, name: dns}, {containerPort: 53, protocol: TCP, name: dns-tcp}]
		        readinessProbe: {httpGet: {path: /ready, port: 8181}}
		        volumeMounts: [{name: config, mountPath: /etc/coredns}]
		      volumes: [{name: config, configMap: {name: coredns}}]
		---
		apiVersion: v1
		kind: Service
		metadata: {name: kube-dns, namespace: kube-system, labels: {k8s-app: kube-dns}}
		spec:
		  clusterIP: $DNS_IP
		  selector: {k8s-app: kube-dns}
		  ports: [{name: dns, port: 53, protocol: UDP}, {name: dns-tcp, port: 53, protocol: TCP}]
	EOF
	kubectl_ -n kube-system rollout status deploy/coredns --timeout 120s >/dev/null || { log "CoreDNS is not ready:"; kubectl_ -n kube-system get pods -o wide >&2; kubectl_ -n kube-system logs deploy/coredns --tail 20 >&2; return 1; }
}

# e2e: Kubernetes' own network e2e tests (test/k8s/node/e2e) against the
# cluster, with ginkgo: $E2E_FOCUS and $E2E_SKIP (regexps over the specs'
# names), $E2E_LABELS (a label filter: Conformance), $E2E_PROCS processes;
# the report (JSON and JUnit) in $S/report.
# The suite: every [sig-network] spec that can apply to a service proxy
# here. Left out by name, each with its reason in docs/conformance.md:
# features, disruptive and serial specs, cloud load balancers, and the
# API-only or non-proxy groups below.
E2E_FOCUS_DEFAULT='\[sig-network\]'
E2E_SKIP_DEFAULT='\[Feature:|\[Disruptive\]|\[Serial\]|LoadBalancer|\[Flaky\]|GCE|AWS|Azure|\[sig-network\] (Netpol API|Ingress API|IngressClass API|ServiceCIDR and IPAddress API|HostPort) |proxy logs on node'
e2e() {
	local report="$S/report"
	rm -rf "$report" && mkdir -p "$report"
	"$S/bin/ginkgo" --procs="${E2E_PROCS:-4}" ${E2E_LABELS:+--label-filter="$E2E_LABELS"} --focus="${E2E_FOCUS:-$E2E_FOCUS_DEFAULT}" --skip="${E2E_SKIP:-$E2E_SKIP_DEFAULT}" \
		--no-color --timeout=2h --output-dir="$report" --json-report=report.json --junit-report=junit.xml \
		"$S/bin/e2e-network.test" -- --kubeconfig="$S/admin.kubeconfig" --kubectl-path="$S/bin/kubectl" --provider=skeleton \
		--num-nodes="$NODES" --report-dir="$report" --disable-log-dump
}

# storm: e2e while kproxy chaos crashes actors of every kind on every node
# for the whole run, a steady $STORM_RATE crashes per second per node
# (default 2). Storms are a minute each, so each one picks among the
# service ports the specs have made by then. The fault-injection API is
# off in deploy/: turned on here (the DaemonSet rolls out again), on
# loopback as always, and driven with kubectl exec. Crashes made per node
# in $S/report/storm.txt.
STORM_KINDS=portal,balancer,affinity,serviceport,watcher,proxier,rules
storm() {
	local rate=${STORM_RATE:-2}
	kubectl_ -n kube-system get ds kproxy -o json | jq -e '.spec.template.spec.containers[0].args | index("--enable-fault-injection")' >/dev/null ||
		kubectl_ -n kube-system patch ds kproxy --type json \
			-p '[{"op":"add","path":"/spec/template/spec/containers/0/args/-","value":"--enable-fault-injection"}]' >/dev/null
	rollout_wait kproxy # not rollout status: old pods drain long-lived connections
	rm -rf "$S/storm" && mkdir -p "$S/storm"
	local pods pod pids=()
	# The rolled-out pods: running, not on their way out.
	pods=$(kubectl_ -n kube-system get pods -l k8s-app=kproxy --field-selector=status.phase=Running -o json |
		jq -r '.items[] | select(.metadata.deletionTimestamp == null) | .metadata.name')
	for pod in $pods; do
		(
			n=0
			while [ ! -e "$S/storm/stop" ]; do
				n=$((n + 1))
				kubectl_ -n kube-system exec "$pod" -c kproxy -- kproxy chaos storm --rate "$rate" --duration 60s --seed "$n" --kinds "$STORM_KINDS" \
					>"$S/storm/$pod.$n.json" 2>&1 || sleep 5
			done
		) &
		pids+=($!)
	done
	local rc=0
	STORM_RATE=$rate e2e || rc=$?
	touch "$S/storm/stop"
	wait "${pids[@]}"
	for pod in $pods; do
		echo "$pod: $(cat "$S/storm/$pod".*.json | jq -Rn '[inputs | fromjson? | .crashes // [] | length] | add // 0') crashes at $rate/s ($STORM_KINDS)"
	done | tee "$S/report/storm.txt" >&2
	return $rc
}

# report: one line per spec the last e2e run selected: its state, wall
# time and name; then the counts. A spec ginkgo skipped by name is left out;
# one that skipped itself (a node count, a provider) says why.
report() {
	jq -r '.[0].SpecReports[]
		| select(.LeafNodeType == "It" and (.State != "skipped" or .Failure.Message != null))
		| [.State, ((.RunTime / 1e8 | round) / 10 | tostring) + "s",
		   ((.ContainerHierarchyTexts + [.LeafNodeText]) | join(" ")),
		   (if .State == "passed" then "" else (.Failure.Message // "" | split("\n")[0]) end)]
		| @tsv' "$S/report/report.json" | sort -k3
	jq -r '[.[0].SpecReports[] | select(.LeafNodeType == "It" and (.State != "skipped" or .Failure.Message != null)) | .State]
		| group_by(.) | map("\(.[0]): \(length)") | join(", ")' "$S/report/report.json"
}

# table [DIR]: a Markdown table of the suite's specs and their states in
# DIR's (default bin/) reports of make e2e: with kproxy, under the storm,
# with kube-proxy; wall times in seconds. For docs/conformance.md.
table() {
	local dir=${1:-$root/bin}
	jq -rn --slurpfile a "$dir/e2e-kproxy.json" --slurpfile b "$dir/e2e-storm.json" --slurpfile c "$dir/e2e-kube-proxy.json" '
		def specs($r): [$r[0][0].SpecReports[] | select(.LeafNodeType == "It" and (.State != "skipped" or .Failure.Message != null))
			| {key: ((.ContainerHierarchyTexts + [.LeafNodeText]) | join(" ")), value: "\(.State) \((.RunTime / 1e9) | round)"}] | from_entries;
		specs($a) as $ka | specs($b) as $kb | specs($c) as $kc
		| "| spec | kproxy | under the storm | kube-proxy |", "| --- | --- | --- | --- |",
		  (($ka + $kb + $kc) | keys[] as $k | "| \($k | sub("^\\[sig-network\\] "; "") | gsub("\\|"; "\\\\|")) | \($ka[$k] // "-") | \($kb[$k] // "-") | \($kc[$k] // "-") |")'
}

# compare KPROXY_JSON KUBE_PROXY_JSON [NAME REF_NAME]: the specs that
# passed with kube-proxy and not with kproxy, less the deliberate
# differences ($DIFFERENCES, default test/cluster/differences.txt, one spec
# name per line, each explained in docs/conformance.md). Fails when any is
# left.
compare() {
	local names='.[0].SpecReports[] | select(.LeafNodeType == "It")
		| {name: ((.ContainerHierarchyTexts + [.LeafNodeText]) | join(" ")), state: .State}'
	local left
	left=$(jq -r --slurpfile kp "$2" --slurpfile diff <(jq -R . "${DIFFERENCES:-$here/differences.txt}" | jq -s .) "
		[\$kp[0] | $names | select(.state == \"passed\") | .name] as \$ref
		| [$names | select(.state != \"passed\" and .state != \"skipped\") | .name]
		| map(select(. as \$n | (\$ref | index(\$n)) != null and (\$diff[0] | index(\$n)) == null))
		| .[]" "$1")
	if [ -n "$left" ]; then
		log "passed with ${4:-kube-proxy}, failed with ${3:-kproxy}:"
		echo "$left" >&2
		return 1
	fi
	log "every spec that passed with ${4:-kube-proxy} passed with ${3:-kproxy}, or is a documented difference"
}

# smoke: a real pod served through kproxy, installed from deploy/, on
# every path a user has: the node itself, another host (a node port), a
# pod (a cluster IP); and a proxy port dialled directly is refused.
smoke() {
	kubectl_ apply -f - >/dev/null <<-EOF
		apiVersion: apps/v1
		kind: Deployment
		metadata: {name: hostname, namespace: default}
		spec:
		  replicas: $NODES
		  selector: {matchLabels: {app: hostname}}
		  template:
		    metadata: {labels: {app: hostname}}
		    spec:
		      topologySpreadConstraints: [{maxSkew: 1, topologyKey: kubernetes.io/hostname, whenUnsatisfiable: DoNotSchedule, labelSelector: {matchLabels: {app: hostname}}}]
		      containers: [{name: hostname, image: kproxy.test/hostname:1, imagePullPolicy: Never, ports: [{containerPort: 8080}]}]
		---
		apiVersion: v1
		kind: Service
		metadata: {name: hostname, namespace: default}
		spec:
		  type: NodePort
		  selector: {app: hostname}
		  ports: [{port: 80, targetPort: 8080, nodePort: 30080}]
	EOF
	rollout_wait "$PROXY"
	kubectl_ rollout status deploy/hostname --timeout 120s >/dev/null
	local ip fail=0 got
	ip=$(kubectl_ get svc hostname -o jsonpath='{.spec.clusterIP}')
	check() { # WHAT ANSWER
		if [[ "$2" == hostname-* ]]; then log "smoke: $1: $2"; else log "smoke: $1: FAILED: $2"; fail=1; fi
	}
	for i in $(seq 1 "$NODES"); do
		got=$(ip netns exec "$(node_ns "$i")" curl -s -m 3 "http://$ip/" 2>&1) || true
		check "node-$i to cluster IP $ip" "$got"
		got=$(curl -s -m 3 "http://$(node_ip "$i"):30080/" 2>&1) || true
		check "another host to node-$i's node port" "$got"
	done
	kubectl_ delete pod smoke-client --ignore-not-found >/dev/null
	kubectl_ run smoke-client --image kproxy.test/hostname:1 --image-pull-policy Never --restart Never -- get "http://$ip/" >/dev/null
	for _ in $(seq 1 60); do
		[ "$(kubectl_ get pod smoke-client -o jsonpath='{.status.phase}')" = Succeeded ] && break
		sleep 1
	done
	got=$(kubectl_ logs smoke-client 2>&1 | awk '{print $2}')
	check "a pod to cluster IP $ip" "$got"
	# A proxy port, dialled from another host, must refuse.
	local pp
	pp=$(ip netns exec "$(node_ns 1)" nft list map inet kproxy service-ips-v4 | sed -n "s/.*$ip \. tcp \. 80 .*: \([0-9]*\).*/\1/p")
	if [ -z "$pp" ]; then
		log "smoke: no proxy port for $ip:80 in node-1's rules: FAILED"; fail=1
	elif curl -s -m 3 "http://$(node_ip 1):$pp/" >/dev/null 2>&1; then
		log "smoke: another host to node-1's proxy port $pp: answered, FAILED"; fail=1
	else
		log "smoke: another host to node-1's proxy port $pp: refused"
	fi
	[ "$fail" = 0 ] || return 1
	log "smoke: passed"
}

# rollout: the node proxy ($PROXY) rolled, undone, reconfigured and
# killed under load, as operators do it, and what each client lost in each
# event. Clients make a connection per request (2 s deadline, curl -m 2 as
# an operator runs it) or hold TCP streams open, an exchange every 200 ms:
#   pod-dns, pod-udp, pod-stream   a pod on node-1, to the Service by DNS name (CoreDNS is served through the node proxy too)
#   node-clusterip, node-stream    node-1's host network, to the cluster IP
#   outside-nodeport, outside-stream   another host (this machine), to node-2's node ports
# Each place also has "cycled" streams, closed cleanly after 20 s and
# opened anew, so that the process each event stops carries streams too.
# The events, each followed by $ROLLOUT_SETTLE seconds of load: rollout
# restart of the DaemonSet, rollout undo, a ConfigMap change rolled out
# (a checksum annotation on the pod template, as Helm charts do), and the
# node proxy's container killed (SIGKILL, as the OOM killer) on each node
# in turn, the kubelet restarting it. Report: $OUT/rollout-$PROXY.{md,jsonl}.
# Fails when kproxy lost a request or a stream (kube-proxy's figures are
# the reference, reported only).
ROLLOUT_SETTLE=${ROLLOUT_SETTLE:-10}
# ROLLOUT_KILLS=0 leaves the kills out.
ROLLOUT_KILLS=${ROLLOUT_KILLS:-1}
rollout() {
	local i
	load_start
	rollout_event restart rollout_restart "$PROXY"
	rollout_event undo rollout_undo "$PROXY"
	rollout_event configmap rollout_configmap "$PROXY"
	if [ "$ROLLOUT_KILLS" = 1 ]; then
		for i in $(seq 1 "$NODES"); do
			rollout_event "kill-$(node_name "$i")" rollout_kill "$PROXY" "$i"
		done
	fi
	load_stop "rollout-$PROXY"
}

# load_start: the check's backend, Service and clients (rollout above),
# then $ROLLOUT_SETTLE seconds of load before the first event.
load_start() {
	local ip
	rm -rf "$S/rollout" && mkdir -p "$S/rollout"
	# A previous check's objects, deleted without waiting, must be gone:
	# its backend pods, terminating, still match the new Service.
	kubectl_ delete pod/rollout-client deploy/rollout-backend svc/rollout --ignore-not-found --wait=true --timeout=120s >/dev/null
	kubectl_ wait --for=delete pod -l app=rollout-backend --timeout=120s >/dev/null 2>&1 || true
	kubectl_ apply -f - >/dev/null <<-EOF
		apiVersion: apps/v1
		kind: Deployment
		metadata: {name: rollout-backend, namespace: default}
		spec:
		  replicas: $NODES
		  selector: {matchLabels: {app: rollout-backend}}
		  template:
		    metadata: {labels: {app: rollout-backend}}
		    spec:
		      topologySpreadConstraints: [{maxSkew: 1, topologyKey: kubernetes.io/hostname, whenUnsatisfiable: DoNotSchedule, labelSelector: {matchLabels: {app: rollout-backend}}}]
		      containers:
		      - name: backend
		        image: kproxy.test/rolloutload:1
		        imagePullPolicy: Never
		        args: [serve]
		        readinessProbe: {httpGet: {path: /, port: 8080}, periodSeconds: 1}
		---
		apiVersion: v1
		kind: Service
		metadata: {name: rollout, namespace: default}
		spec:
		  type: NodePort
		  selector: {app: rollout-backend}
		  ports:
		  - {name: http, port: 80, targetPort: 8080, nodePort: 30090}
		  - {name: udp, port: 81, targetPort: 8081, protocol: UDP, nodePort: 30091}
		  - {name: stream, port: 82, targetPort: 8082, nodePort: 30092}
	EOF
	kubectl_ rollout status deploy/rollout-backend --timeout 120s >/dev/null
	rollout_wait "$PROXY"
	ip=$(kubectl_ get svc rollout -o jsonpath='{.spec.clusterIP}')
	# The node proxies serve the new Service before any client starts.
	for _ in $(seq 1 120); do
		ip netns exec "$(node_ns 1)" curl -s -m 1 -o /dev/null "http://$ip/" &&
			curl -s -m 1 -o /dev/null "http://$(node_ip 2):30090/" && break
		sleep 0.5
	done
	kubectl_ delete pod rollout-client --ignore-not-found >/dev/null
	kubectl_ apply -f - >/dev/null <<-EOF
		apiVersion: v1
		kind: Pod
		metadata: {name: rollout-client, namespace: default}
		spec:
		  nodeName: $(node_name 1)
		  restartPolicy: Never
		  terminationGracePeriodSeconds: 5
		  containers:
		  - name: client
		    image: kproxy.test/rolloutload:1
		    imagePullPolicy: Never
		    args: [load, -http, "pod-dns=http://rollout/", -udp, "pod-udp=rollout:81", -stream, "pod-stream=rollout:82", -cycled-stream, "pod-cycled=rollout:82"]
	EOF
	kubectl_ wait --for=condition=Ready pod/rollout-client --timeout 120s >/dev/null
	start rollout-node ip netns exec "$(node_ns 1)" "$S/bin/rolloutload" load -http "node-clusterip=http://$ip/" -stream "node-stream=$ip:82" -cycled-stream "node-cycled=$ip:82"
	start rollout-outside "$S/bin/rolloutload" load -http "outside-nodeport=http://$(node_ip 2):30090/" -stream "outside-stream=$(node_ip 2):30092" -cycled-stream "outside-cycled=$(node_ip 2):30092"
	log "clients started; $ROLLOUT_SETTLE s of load before the first event"
	sleep "$ROLLOUT_SETTLE"
}

# load_stop NAME: the clients stop and write their summaries; the report
# is $OUT/NAME.{md,jsonl}. Fails when kproxy (the node proxy at the end)
# lost a request or a stream.
load_stop() {
	local out=${OUT:-$root/bin} dir="$S/rollout" lost
	mkdir -p "$out"
	kubectl_ exec rollout-client -- /rolloutload stop >/dev/null
	kill -TERM "$(cat "$S/run/rollout-node.pid")" "$(cat "$S/run/rollout-outside.pid")"
	kubectl_ wait --for=jsonpath='{.status.phase}'=Succeeded pod/rollout-client --timeout 60s >/dev/null
	for _ in $(seq 1 100); do
		kill -0 "$(cat "$S/run/rollout-node.pid")" 2>/dev/null || kill -0 "$(cat "$S/run/rollout-outside.pid")" 2>/dev/null || break
		sleep 0.1
	done
	{ kubectl_ logs rollout-client; cat "$S/run/rollout-node.log" "$S/run/rollout-outside.log"; } | grep '^{' >"$dir/clients.jsonl"
	kubectl_ get pods -A -o json >"$dir/pods.json" # where they ran, for rollout_diagnose
	# The cluster as it was, for what runs next (the e2e suite).
	kubectl_ delete pod rollout-client --wait=false >/dev/null
	kubectl_ delete deploy rollout-backend --wait=false >/dev/null
	kubectl_ delete svc rollout --wait=false >/dev/null
	cat "$dir/events.jsonl" "$dir/clients.jsonl" >"$out/$1.jsonl"
	lost=$(jq -s '[.[] | select(.kind == "summary") | (.failed // 0) + (.broken // 0)] | add' "$out/$1.jsonl")
	if [ "$PROXY" = kproxy ] && [ "$lost" != 0 ]; then
		rollout_diagnose "$dir/pods.json" "$out/$1-proxy.log" >&2
	fi
	rollout_report "$out/$1.jsonl" | tee "$out/$1.md" >&2
	if [ "$PROXY" = kproxy ] && [ "$lost" != 0 ]; then
		log "$1: kproxy lost $lost requests or streams"
		return 1
	fi
	log "$1: $PROXY lost $lost requests or streams"
}

# rollout_diagnose PODS FILE: what a lost request needs to be explained,
# when only the end of the output is seen (CI): where the pods ran (PODS,
# kubectl get pods -A -o json), and each kproxy container's warnings and
# errors (this one and the one before it); every kproxy log in FILE.
rollout_diagnose() {
	local pod
	jq -r '.items[] | select(.metadata.name | test("kproxy|coredns|rollout"))
		| "\(.metadata.name) \(.status.phase) \(.status.podIP // "-") \(.spec.nodeName // "-")"' "$1"
	shift
	for pod in $(kubectl_ -n kube-system get pods -l k8s-app=kproxy -o name); do
		{
			echo "== $pod (previous container)"
			kubectl_ -n kube-system logs "$pod" -c kproxy --previous 2>&1
			echo "== $pod"
			kubectl_ -n kube-system logs "$pod" -c kproxy 2>&1
		} >>"$1"
		echo "$pod: warnings and errors"
		{ kubectl_ -n kube-system logs "$pod" -c kproxy --previous 2>/dev/null; kubectl_ -n kube-system logs "$pod" -c kproxy 2>/dev/null; } |
			{ grep -E 'WRN|ERR|"level":"(warn|error)"' || true; } | tail -n 8
	done
}

# swap: the node proxy swapped under load, kube-proxy to kproxy and back,
# as docs/operating.md tells operators to (run on a kube-proxy cluster,
# PROXY=kube-proxy): kproxy installed and Ready beside kube-proxy (its
# rules, programmed last, take the new connections), kube-proxy's
# DaemonSet deleted and its rules removed on each node (kube-proxy
# --cleanup); then kube-proxy installed again and synced (its rules now
# last), kproxy's DaemonSet deleted (its pods drain what they carry) and,
# once its pods are gone, its rules removed (kproxy cleanup). Report:
# $OUT/swap.{md,jsonl}.
swap() {
	load_start
	rollout_event to-kproxy swap_to_kproxy
	rollout_event to-kube-proxy swap_to_kube_proxy
	PROXY=kube-proxy load_stop swap
	kproxy_gone
}

swap_to_kproxy() {
	local i kp
	kp=$(CGO_ENABLED=0 MODULE=node "$root/test/k8s/build-k8s-cmd.sh" kube-proxy --path)
	kproxy_daemonset
	rollout_wait kproxy
	kubectl_ -n kube-system delete ds kube-proxy --wait=true >/dev/null
	kubectl_ -n kube-system wait --for=delete pod -l k8s-app=kube-proxy --timeout 120s >/dev/null
	for i in $(seq 1 "$NODES"); do
		ip netns exec "$(node_ns "$i")" "$kp" --cleanup >/dev/null 2>&1
	done
}

# Both proxies' NAT chains hook at priority -100, where the one registered
# last runs first: kube-proxy's, programmed after kproxy's, take the new
# connections once kube-proxy has synced; then kproxy's DaemonSet goes and
# its rules are removed.
swap_to_kube_proxy() {
	local i
	kube_proxy_daemonset
	rollout_wait kube-proxy
	kube_proxy_synced
	# Its pods drain the connections they carry for up to
	# --shutdown-grace-period (their pod is being deleted: no process
	# follows); kube-proxy's rules take every new one meanwhile.
	kubectl_ -n kube-system delete ds kproxy --wait=false >/dev/null
}

# kproxy_gone: once kproxy's pods have drained and exited, its rules are
# removed on each node (kproxy cleanup, as docs/operating.md says).
kproxy_gone() {
	local i
	kubectl_ -n kube-system wait --for=delete pod -l k8s-app=kproxy --timeout 400s >/dev/null
	for i in $(seq 1 "$NODES"); do
		ip netns exec "$(node_ns "$i")" "$root/bin/image/kproxy" cleanup --portal nftables >/dev/null 2>&1
	done
}

# kube_proxy_synced: until kube-proxy has programmed the check's Service on
# every node (its metrics port may be kproxy's while both run).
kube_proxy_synced() {
	local i ip
	ip=$(kubectl_ get svc rollout -o jsonpath='{.spec.clusterIP}')
	for i in $(seq 1 "$NODES"); do
		for _ in $(seq 1 240); do
			ip netns exec "$(node_ns "$i")" nft list map ip kube-proxy service-ips 2>/dev/null | grep -q "$ip . tcp . 80 " && break
			sleep 0.5
		done
	done
}

# rollout_event NAME CMD...: runs CMD as the event NAME, then the settle.
rollout_event() {
	local name=$1 began
	shift
	began=$(date -u +%FT%T.%NZ)
	log "rollout: $name"
	"$@"
	echo "{\"t\":\"$began\",\"event\":\"$name\",\"seconds\":$(($(date +%s) - $(date -d "$began" +%s)))}" >>"$S/rollout/events.jsonl"
	sleep "$ROLLOUT_SETTLE"
}

rollout_restart() {
	kubectl_ -n kube-system rollout restart "ds/$1" >/dev/null
	rollout_wait "$1"
}

rollout_undo() {
	kubectl_ -n kube-system rollout undo "ds/$1" >/dev/null
	rollout_wait "$1"
}

# rollout_wait DS: until every node has a Ready pod of the DaemonSet's
# newest revision. Not kubectl rollout status, which also waits for the
# old pods to be gone: kproxy's drain the long-lived connections they
# carry, as the check's streams are, and end when those do.
rollout_wait() {
	local gen hash ready
	for _ in $(seq 1 600); do
		gen=$(kubectl_ -n kube-system get ds "$1" -o jsonpath='{.metadata.generation} {.status.observedGeneration}')
		if [ "${gen% *}" = "${gen#* }" ]; then
			hash=$(kubectl_ -n kube-system get controllerrevisions -l "k8s-app=$1" -o json |
				jq -r '.items | max_by(.revision) | .metadata.labels["controller-revision-hash"]')
			ready=$(kubectl_ -n kube-system get pods -l "k8s-app=$1,controller-revision-hash=$hash" -o json |
				jq '[.items[] | select(.metadata.deletionTimestamp == null and any(.status.conditions[]?; .type == "Ready" and .status == "True")) | .spec.nodeName] | unique | length')
			[ "$ready" = "$NODES" ] && return
		fi
		sleep 0.5
	done
	log "rollout: $1's newest revision not Ready on every node within 300 s"
	return 1
}

# rollout_configmap DS: a change to the DaemonSet's ConfigMap (named as
# it), rolled out by a checksum of its data on the pod template.
rollout_configmap() {
	edit_config "$1" --arg c "# changed by the rollout check at $(date -u +%FT%TZ)" '.data["config.conf"] += "\n" + $c + "\n"'
}

# edit_config DS JQ-ARGS...: the DaemonSet's ConfigMap (named as it)
# rewritten by jq with JQ-ARGS (the filter last), and rolled out.
edit_config() {
	local ds=$1
	shift
	kubectl_ -n kube-system get cm "$ds" -o json | jq "$@" | kubectl_ replace -f - >/dev/null
	roll_configmap "$ds"
}

# roll_configmap DS: the DaemonSet rolled out for its ConfigMap's data as
# it is now (a checksum of it on the pod template), and Ready everywhere.
roll_configmap() {
	local sum
	sum=$(kubectl_ -n kube-system get cm "$1" -o json | jq -c .data | sha256sum | cut -c1-16)
	kubectl_ -n kube-system patch ds "$1" --type merge \
		-p "{\"spec\":{\"template\":{\"metadata\":{\"annotations\":{\"kproxy.test/config-checksum\":\"$sum\"}}}}}" >/dev/null
	rollout_wait "$1"
}

# rollout_kill DS N: SIGKILL to the DaemonSet's container on node N
# (through the node's containerd); back when the kubelet has restarted it
# and it is Ready.
rollout_kill() {
	local pod restarts id sock
	sock="$S/nodes/$(node_name "$2")/containerd/containerd.sock"
	pod=$(kubectl_ -n kube-system get pods -l "k8s-app=$1" --field-selector "spec.nodeName=$(node_name "$2")" -o json |
		jq -r '[.items[] | select(.metadata.deletionTimestamp == null)] | max_by(.metadata.creationTimestamp) | .metadata.name')
	restarts=$(kubectl_ -n kube-system get pod "$pod" -o jsonpath='{.status.containerStatuses[0].restartCount}')
	id=$(kubectl_ -n kube-system get pod "$pod" -o jsonpath='{.status.containerStatuses[0].containerID}')
	ctr --address "$sock" -n k8s.io task kill -s SIGKILL "${id#containerd://}"
	for _ in $(seq 1 300); do
		[ "$(kubectl_ -n kube-system get pod "$pod" -o jsonpath='{.status.containerStatuses[0].restartCount} {.status.containerStatuses[0].ready}')" = "$((restarts + 1)) true" ] && return
		sleep 0.5
	done
	log "rollout: $pod was not restarted and Ready within 150 s"
	return 1
}

# rollout_report JSONL: a Markdown table, a row per client: what it made
# in all, then what it lost before the first event and in each event
# (from its start to the next one's).
rollout_report() {
	jq -rs '
		def ts: capture("^(?<s>[^.Z]+)(?<f>\\.[0-9]+)?Z$") | (.s + "Z" | fromdateiso8601) + ("0" + (.f // "") | tonumber);
		([.[] | select(.event)] | sort_by(.t | ts)) as $ev
		| [.[] | select(.kind == "summary")] as $sum
		| [.[] | select(.kind == "fail" or .kind == "break")] as $lost
		| def window($t): ([$ev[] | select((.t | ts) <= $t) | .event] | last) // "before";
		  (["before"] + [$ev[].event]) as $cols
		| "| client | made | lost | " + ($cols | map(if . == "before" then "before the events" else . end) | join(" | ")) + " |",
		  "| --- | --- | --- | " + ($cols | map("---") | join(" | ")) + " |",
		  ($sum | sort_by(.client)[] | . as $s
			| [$lost[] | select(.client == $s.client) | window(.t | ts)] as $w
			| "| \($s.client) | " + (if $s.streams then "\($s.streams) streams, \($s.exchanges) exchanges" else "\($s.requests) requests" end)
			  + " | " + (if $s.streams then "\($s.broken // 0) broken" else "\($s.failed // 0) failed" end)
			  + " | " + ($cols | map(. as $c | [$w[] | select(. == $c)] | length | tostring) | join(" | ")) + " |"),
		  "",
		  "Events (seconds each took): " + ($ev | map("\(.event) \(.seconds) s") | join(", ")),
		  "",
		  "First errors: " + ([$lost | group_by(.client)[] | "\(.[0].client): \(.[0].error)"] | join("; "))
	' "$1"
}

# core: the node proxies fed by core replicas instead of each watching the
# API server, as docs/core-and-backends.md (Deploying) tells: deploy/core.yaml
# (three replicas on protoactor's Kubernetes provider) installed and Ready,
# then kproxy's DaemonSet rolled to --source remote at the replicas' node
# addresses. Under the rollout check's load: every node proxy subscribed;
# one replica killed (SIGKILL); a Service made at once served on every node
# within CORE_SYNC_LIMIT s (a node whose replica died subscribes to another,
# and gets the change), and the load loses nothing. Report: $OUT/core.{md,jsonl}.
CORE_SYNC_LIMIT=${CORE_SYNC_LIMIT:-5}
core() {
	local out=${OUT:-$root/bin} addrs pod node id sock began ip i t0 took connected served p n
	mkdir -p "$out"
	# The token is made here and never printed.
	kubectl_ -n kube-system create secret generic kproxy-core-token \
		--from-literal=token="$(head -c32 /dev/urandom | base64)" --dry-run=client -o yaml | kubectl_ apply -f - >/dev/null
	# As a user of this cluster edits it: it has no control-plane nodes
	# (the replicas run on the nodes), and its API server is on the host.
	perl -0pe 's#\n        node-role.kubernetes.io/control-plane: ""##;
		s#(name: KUBERNETES_SERVICE_HOST\n\s+)valueFrom:\n\s+fieldRef:\n\s+fieldPath: status.hostIP#${1}value: "'"$HOST_IP"'"#;
		s#(name: KUBERNETES_SERVICE_PORT\n\s+value: )"6443"#${1}"'"$APISERVER_PORT"'"#' "$root/deploy/core.yaml" | kubectl_ apply -f - >/dev/null
	kubectl_ -n kube-system rollout status deploy/kproxy-core --timeout 300s >/dev/null
	addrs=$(kubectl_ -n kube-system get pods -l app.kubernetes.io/name=kproxy-core -o json |
		jq -r '[.items[] | .status.hostIP + ":7400"] | join(",")')
	log "core: replicas Ready at $addrs"
	# The node proxies as docs/core-and-backends.md has them: the replicas'
	# addresses, a remoting port of their own (0: any free one, so the
	# old and new pod of a rollout do not contend for it), the token.
	kubectl_ -n kube-system get ds kproxy -o json | jq -e '.spec.template.spec.containers[] | select(.name == "kproxy") | .args | index(["kube"])' >/dev/null &&
	kubectl_ -n kube-system get ds kproxy -o json | jq --arg src "remote:$addrs" '
		.spec.template.spec.containers |= map(if .name == "kproxy" then
			.args = (.args | map(if . == "kube" then $src else . end)) + ["--remote-listen", "$(NODE_IP):0",
				"--remote-allow-non-loopback", "--remote-token-file", "/etc/kproxy-core/token"]
			| .env += [{name: "NODE_IP", valueFrom: {fieldRef: {fieldPath: "status.hostIP"}}}]
			| .volumeMounts += [{name: "core-token", mountPath: "/etc/kproxy-core", readOnly: true}]
		else . end)
		| .spec.template.spec.volumes += [{name: "core-token", secret: {secretName: "kproxy-core-token"}}]' |
		kubectl_ replace -f - >/dev/null
	rollout_wait kproxy
	# The metrics port is shared with a pod still draining beside the new
	# one (an older kproxy, without the metric): one answer is enough.
	for i in $(seq 1 "$NODES"); do
		connected=""
		for _ in $(seq 1 60); do
			if ip netns exec "$(node_ns "$i")" curl -s -m 2 http://127.0.0.1:10249/metrics | grep -qx 'kproxy_remote_core_connected 1'; then
				connected=1
				break
			fi
			sleep 0.5
		done
		[ -n "$connected" ] || { log "core: $(node_name "$i")'s kproxy is not connected to a core"; return 1; }
	done
	log "core: every node proxy follows a core replica"
	kubectl_ delete svc core-check --ignore-not-found --wait=true >/dev/null
	load_start
	# The replica serving the most nodes killed: its container, through
	# its node's containerd.
	pod="" served=0
	for p in $(kubectl_ -n kube-system get pods -l app.kubernetes.io/name=kproxy-core \
		-o jsonpath='{range .items[*]}{.metadata.name}={.status.podIP}{"\n"}{end}'); do
		n=$(curl -s -m 2 "http://${p#*=}:10263/metrics" | awk '$1 == "kproxy_core_subscriptions" { print $2 }')
		if [ "${n:-0}" -gt "$served" ]; then pod=${p%%=*} served=$n; fi
	done
	[ -n "$pod" ] || { log "core: no replica serves a node"; return 1; }
	node=$(kubectl_ -n kube-system get pod "$pod" -o jsonpath='{.spec.nodeName}')
	id=$(kubectl_ -n kube-system get pod "$pod" -o jsonpath='{.status.containerStatuses[0].containerID}')
	sock="$S/nodes/$node/containerd/containerd.sock"
	began=$(date -u +%FT%T.%NZ)
	log "core: SIGKILL to replica $pod on $node, serving $served node proxies"
	t0=$(date +%s.%N)
	ctr --address "$sock" -n k8s.io task kill -s SIGKILL "${id#containerd://}"
	# A change made at once: a Service for the check's backends.
	kubectl_ apply -f - >/dev/null <<-EOF
		apiVersion: v1
		kind: Service
		metadata: {name: core-check, namespace: default}
		spec:
		  selector: {app: rollout-backend}
		  ports: [{name: http, port: 80, targetPort: 8080}]
	EOF
	ip=$(kubectl_ get svc core-check -o jsonpath='{.spec.clusterIP}')
	for i in $(seq 1 "$NODES"); do
		for _ in $(seq 1 600); do
			ip netns exec "$(node_ns "$i")" curl -s -m 1 -o /dev/null "http://$ip/" && break
			sleep 0.1
		done
	done
	took=$(awk -v now="$(date +%s.%N)" -v t0="$t0" 'BEGIN { printf "%.2f", now - t0 }')
	echo "{\"t\":\"$began\",\"event\":\"replica killed\",\"seconds\":${took%.*}}" >>"$S/rollout/events.jsonl"
	log "core: a Service made as a replica died is served on every node after $took s"
	sleep "$ROLLOUT_SETTLE"
	kubectl_ delete svc core-check --wait=false >/dev/null
	load_stop core || return 1
	if awk -v took="$took" -v limit="$CORE_SYNC_LIMIT" 'BEGIN { exit !(took > limit) }'; then
		log "core: every node in sync after $took s, above $CORE_SYNC_LIMIT s"
		return 1
	fi
}

# The reference: upstream's kube-proxy (test/k8s/node), nftables mode, as
# kubeadm installs it, where kproxy would be ($PROXY=kube-proxy).
kube_proxy_daemonset() {
	kubectl_ apply -f - >/dev/null <<-EOF
		apiVersion: v1
		kind: ServiceAccount
		metadata: {name: kube-proxy, namespace: kube-system}
		---
		apiVersion: rbac.authorization.k8s.io/v1
		kind: ClusterRoleBinding
		metadata: {name: "kubeadm:node-proxier"}
		roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "system:node-proxier"}
		subjects: [{kind: ServiceAccount, name: kube-proxy, namespace: kube-system}]
		---
		apiVersion: v1
		kind: ConfigMap
		metadata: {name: kube-proxy, namespace: kube-system}
		data:
		  config.conf: |
		    apiVersion: kubeproxy.config.k8s.io/v1alpha1
		    kind: KubeProxyConfiguration
		    mode: nftables
		    clusterCIDR: $CLUSTER_CIDRS
		    # nf_conntrack_max is the machine's, not a node's: left alone.
		    conntrack: {maxPerCore: 0}
		    healthzBindAddress: 0.0.0.0:10256
		    metricsBindAddress: 127.0.0.1:10249
		    clientConnection: {kubeconfig: /var/lib/kube-proxy/kubeconfig.conf}
		  kubeconfig.conf: |
		    apiVersion: v1
		    kind: Config
		    clusters: [{name: default, cluster: {certificate-authority: /var/run/secrets/kubernetes.io/serviceaccount/ca.crt, server: "https://$HOST_IP:$APISERVER_PORT"}}]
		    users: [{name: default, user: {tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token}}]
		    contexts: [{name: default, context: {cluster: default, namespace: default, user: default}}]
		    current-context: default
		---
		apiVersion: apps/v1
		kind: DaemonSet
		metadata: {name: kube-proxy, namespace: kube-system, labels: {k8s-app: kube-proxy}}
		spec:
		  selector: {matchLabels: {k8s-app: kube-proxy}}
		  template:
		    metadata: {labels: {k8s-app: kube-proxy}}
		    spec:
		      serviceAccountName: kube-proxy
		      hostNetwork: true
		      priorityClassName: system-node-critical
		      tolerations: [{operator: Exists}]
		      containers:
		      - name: kube-proxy
		        image: kproxy.test/kube-proxy:1
		        imagePullPolicy: Never
		        command: [/kube-proxy, --config=/var/lib/kube-proxy/config.conf, --hostname-override=\$(NODE_NAME)]
		        env: [{name: NODE_NAME, valueFrom: {fieldRef: {fieldPath: spec.nodeName}}}]
		        securityContext: {privileged: true}
		        volumeMounts:
		        - {name: config, mountPath: /var/lib/kube-proxy}
		        - {name: xtables-lock, mountPath: /run/xtables.lock}
		        - {name: lib-modules, mountPath: /lib/modules, readOnly: true}
		      volumes:
		      - {name: config, configMap: {name: kube-proxy}}
		      - {name: xtables-lock, hostPath: {path: /run/xtables.lock, type: FileOrCreate}}
		      - {name: lib-modules, hostPath: {path: /lib/modules}}
	EOF
}

save_sysctls() {
	[ -f "$S/sysctls" ] && return
	for k in vm.overcommit_memory kernel.panic kernel.panic_on_oops; do
		echo "$k=$(sysctl -n "$k")"
	done >"$S/sysctls"
}

up() {
	[ "$(id -u)" = 0 ] || { log "needs root"; exit 1; }
	[ ! -e "$S/run" ] || { log "$S/run exists: run '$0 down' first"; exit 1; }
	mkdir -p "$S"
	trap 'log "up failed; tearing down"; down' ERR INT TERM
	need_packages
	build
	images
	save_sysctls
	network
	control_plane
	for i in $(seq 1 "$NODES"); do node "$i"; done
	for _ in $(seq 1 120); do
		[ "$(kubectl_ get nodes --no-headers 2>/dev/null | grep -cw Ready)" = "$NODES" ] && break
		sleep 1
	done
	kubectl_ get nodes -o wide
	if [ "$PROXY" = kube-proxy ]; then kube_proxy_daemonset; else kproxy_daemonset; fi
	dns || log "continuing without DNS"
	trap - ERR INT TERM
	log "up: KUBECONFIG=$S/admin.kubeconfig"
}

down() {
	set +e
	for f in "$S"/run/*.pid; do
		[ -f "$f" ] && kill "$(cat "$f")" 2>/dev/null
	done
	sleep 1
	for f in "$S"/run/*.pid; do
		[ -f "$f" ] && kill -9 "$(cat "$f")" 2>/dev/null
	done
	# The containers' shims and processes, then every mount under $S.
	pkill -9 -f "containerd-shim-runc-v2 .*$S" 2>/dev/null
	for cg in /sys/fs/cgroup/*/kproxy-node-*; do
		[ -d "$cg" ] || continue
		for p in $(cat $(find "$cg" -name cgroup.procs) 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
	done
	sleep 0.5
	grep " $S" /proc/mounts | awk '{print $2}' | sort -r | while read -r m; do umount -l "$m"; done
	for cg in $(find /sys/fs/cgroup/*/ -maxdepth 1 -name 'kproxy-node-*' 2>/dev/null); do
		find "$cg" -depth -type d -exec rmdir {} \; 2>/dev/null
	done
	# The pods' network namespaces containerd pinned (cni-UUID), left
	# behind when their shims were killed: those with no process left.
	for n in $(ip netns list | awk '/^cni-/{print $1}'); do
		[ -z "$(ip netns pids "$n" 2>/dev/null)" ] && ip netns del "$n" 2>/dev/null
	done
	for i in $(seq 1 9); do
		ip netns del "$(node_ns "$i")" 2>/dev/null
		ip route del "$(pod_cidr "$i")" 2>/dev/null
	done
	ip route del blackhole "$SERVICE_CIDR" 2>/dev/null
	ip -6 route del blackhole "$SERVICE_CIDR6" 2>/dev/null
	for i in $(seq 1 9); do ip -6 route del "$(pod_cidr6 "$i")" 2>/dev/null; done
	ip link del "$BRIDGE" 2>/dev/null
	# Where host-local kept every node's addresses before each node had
	# its own (the nodes share a file system).
	rm -rf /var/lib/cni/networks/kpc
	[ -f "$S/sysctls" ] && sysctl -qw $(cat "$S/sysctls")
	# The mount points node_mounts made on the host (empty: the nodes'
	# files are theirs), and the host-wide /run/kproxy of earlier versions.
	[ -f "$S/made-host-paths" ] && rm -rf $(cat "$S/made-host-paths")
	[ -f "$S/made-run-kproxy" ] && rm -rf /run/kproxy
	rm -rf "$S/run" "$S/nodes" "$S/apiserver" "$S/sysctls" "$S/made-run-kproxy" "$S/made-host-paths"
	log "down"
}

# suite NAME: the last e2e run's report kept as $OUT/e2e-NAME.{json,txt},
# the node proxies' logs as $OUT/e2e-NAME-proxy.log (one line each, the pod
# first).
suite() {
	cp "$S/report/report.json" "$out/e2e-$1.json"
	report >"$out/e2e-$1.txt"
	kubectl_ -n kube-system logs -l "k8s-app=$PROXY" -c "$PROXY" --prefix --tail=-1 --max-log-requests=9 >"$out/e2e-$1-proxy.log" 2>&1 || true
	log "$1: $(tail -1 "$out/e2e-$1.txt") in $((SECONDS - start)) s; $out/e2e-$1.txt"
}

# The spec whose outcome depends on how a proxy tells pods' traffic apart
# (detectLocalMode): under ClusterCIDR every pod's traffic is the
# cluster's own, so a node port of externalTrafficPolicy: Local reached
# from another node's pod is served by the cluster's endpoints.
TERMINATING_LOCAL_SPEC='Services should fallback to local terminating endpoints when there are no ready endpoints with externalTrafficPolicy=Local'

# set_detect_local DS MODE: the node proxy's KubeProxyConfiguration (its
# ConfigMap, named as the DaemonSet) set to detectLocalMode MODE, rolled out.
set_detect_local() {
	edit_config "$1" --arg m "$2" '.data["config.conf"] |= (gsub("(?m)^detectLocalMode:.*\n"; "") + "detectLocalMode: " + $m + "\n")'
}

# node_pod_cidrs: each Node's spec.podCIDRs, as the controller manager's
# allocator would set them (this cluster's CNI ranges): what
# detectLocalMode NodeCIDR reads. Set once; the field is immutable.
node_pod_cidrs() {
	local i
	for i in $(seq 1 "$NODES"); do
		[ -n "$(kubectl_ get node "$(node_name "$i")" -o jsonpath='{.spec.podCIDR}')" ] && continue
		kubectl_ patch node "$(node_name "$i")" --type merge \
			-p "{\"spec\":{\"podCIDR\":\"$(pod_cidr "$i")\",\"podCIDRs\":[\"$(both "$(pod_cidr "$i")" "$(pod_cidr6 "$i")" | sed 's/,/","/')\"]}}" >/dev/null
	done
}

# nodecidr: the terminating-fallback spec with $PROXY under
# detectLocalMode NodeCIDR (only this node's pods are its own), then
# ClusterCIDR again. Every proxy must pass it there. With CAPTURE=1 the
# spec runs first under ClusterCIDR with a packet capture on every node
# (its TCP port 80 and node ports): $OUT/capture-$PROXY.txt shows where
# each connection's packets went. Reports: $OUT/e2e-nodecidr-$PROXY.*.
nodecidr() {
	local out=${OUT:-$root/bin} start rc=0 i pids=()
	mkdir -p "$out"
	node_pod_cidrs
	if [ "${CAPTURE:-0}" = 1 ]; then
		for i in $(seq 1 "$NODES"); do
			ip netns exec "$(node_ns "$i")" timeout 600 tcpdump -i any -nn -l -tttt 'tcp port 80 or tcp portrange 30000-32767' \
				>"$S/capture-$i.txt" 2>/dev/null &
			pids+=($!)
		done
		start=$SECONDS
		E2E_FOCUS="$TERMINATING_LOCAL_SPEC" e2e >"$out/e2e-clustercidr-$PROXY.log" 2>&1 || true
		suite "clustercidr-$PROXY"
		kill "${pids[@]}" 2>/dev/null
		wait "${pids[@]}" 2>/dev/null
		for i in $(seq 1 "$NODES"); do
			echo "== $(node_name "$i") ($(node_ip "$i"), pods $(pod_cidr "$i"))"
			cat "$S/capture-$i.txt"
		done >"$out/capture-$PROXY.txt"
		log "capture: $out/capture-$PROXY.txt"
	fi
	set_detect_local "$PROXY" NodeCIDR
	start=$SECONDS
	E2E_FOCUS="$TERMINATING_LOCAL_SPEC" e2e >"$out/e2e-nodecidr-$PROXY.log" 2>&1 || true
	suite "nodecidr-$PROXY"
	grep -q "^passed" "$out/e2e-nodecidr-$PROXY.txt" || { log "nodecidr: $PROXY failed the spec under NodeCIDR"; rc=1; }
	set_detect_local "$PROXY" ClusterCIDR
	return $rc
}

# all: what make e2e runs. The smoke check, the rollout check, the suite
# with kproxy, again under a crash storm (same cluster), then the rollout
# check, the suite and the swap with kube-proxy on a cluster of its own;
# the reports in $OUT (default bin/). Fails where kproxy lost a request or
# a stream in the rollout check, fails a spec kube-proxy passed that is
# not a documented difference, or fails under the storm a spec it passed
# without.
all() {
	local out=${OUT:-$root/bin} start
	mkdir -p "$out"
	trap 'down' EXIT
	NODES=${KPROXY_CLUSTER_NODES:-3}
	PROXY=kproxy
	up
	smoke
	local rc=0
	OUT=$out rollout >"$out/rollout-kproxy.log" 2>&1 || rc=1
	start=$SECONDS
	e2e >"$out/e2e-kproxy.log" 2>&1 || true
	suite kproxy
	start=$SECONDS
	storm >"$out/e2e-storm.log" 2>&1 || true
	suite storm
	cp "$S/report/storm.txt" "$out/e2e-storm-crashes.txt"
	OUT=$out nodecidr >"$out/nodecidr-kproxy.log" 2>&1 || rc=1
	if dual; then OUT=$out dualstack; fi
	OUT=$out core >"$out/core.log" 2>&1 || rc=1
	down
	PROXY=kube-proxy
	up
	OUT=$out rollout >"$out/rollout-kube-proxy.log" 2>&1 || true
	start=$SECONDS
	e2e >"$out/e2e-kube-proxy.log" 2>&1 || true
	suite kube-proxy
	OUT=$out CAPTURE=1 nodecidr >"$out/nodecidr-kube-proxy.log" 2>&1 || rc=1
	if dual; then OUT=$out dualstack; fi
	# Last: it leaves kube-proxy's DaemonSet re-installed over kproxy's.
	OUT=$out swap >"$out/swap.log" 2>&1 || true
	down
	log "rollout, kproxy: $(tail -1 "$out/rollout-kproxy.log")"
	log "rollout, kube-proxy: $(tail -1 "$out/rollout-kube-proxy.log")"
	log "swap: $(tail -1 "$out/swap.log")"
	log "core replicas: $(grep 'served on every node' "$out/core.log" | tail -1); $(tail -1 "$out/core.log")"
	compare "$out/e2e-kproxy.json" "$out/e2e-kube-proxy.json" || rc=1
	log "under the storm ($(cat "$out/e2e-storm-crashes.txt" | tr '\n' ' ')):"
	DIFFERENCES=/dev/null compare "$out/e2e-storm.json" "$out/e2e-kproxy.json" "kproxy under the storm" "kproxy" || rc=1
	if dual; then
		log "the dual-stack specs:"
		compare "$out/e2e-dualstack-kproxy.json" "$out/e2e-dualstack-kube-proxy.json" || rc=1
	fi
	return $rc
}

# conformance: what CI runs. The smoke check, the rollout check, and the
# suite's [Conformance] specs against kproxy; fails if any fails. The report in $OUT/e2e-conformance.*.
conformance() {
	local out=${OUT:-$root/bin} start
	mkdir -p "$out"
	trap 'down' EXIT
	PROXY=kproxy
	up
	smoke
	# The rollout check: rolled, undone, reconfigured and killed on each
	# node under load, nothing lost.
	OUT=$out rollout
	start=$SECONDS
	E2E_LABELS=Conformance e2e >"$out/e2e-conformance.log" 2>&1 || true
	suite conformance
	local failed
	failed=$(jq -r '.[0].SpecReports[] | select(.LeafNodeType == "It" and (.State == "failed" or .State == "timedout" or .State == "panicked" or .State == "interrupted" or .State == "aborted"))
		| (.ContainerHierarchyTexts + [.LeafNodeText]) | join(" ")' "$out/e2e-conformance.json")
	if [ -n "$failed" ] || ! grep -q passed "$out/e2e-conformance.txt"; then
		log "conformance: failed:"
		echo "${failed:-no spec ran}" >&2
		grep -v '^passed' "$out/e2e-conformance.txt" >&2 || true
		return 1
	fi
	log "conformance: every [Conformance] spec passed"
}

# dualstack: on a dual-stack cluster (KPROXY_CLUSTER_IPFAMILY=dual), the
# suite's [Feature:IPv6DualStack] specs against $PROXY; the report in
# $OUT/e2e-dualstack-$PROXY.*.
DUALSTACK_FOCUS='\[sig-network\] \[Feature:IPv6DualStack\]'
DUALSTACK_SKIP='\[Feature:SCTPConnectivity\]|\[Disruptive\]|\[Serial\]|LoadBalancer|\[Flaky\]|GCE|AWS|Azure'
dualstack() {
	dual || { log "dualstack: the cluster must be up with KPROXY_CLUSTER_IPFAMILY=dual"; return 2; }
	local out=${OUT:-$root/bin} start=$SECONDS
	mkdir -p "$out"
	E2E_FOCUS=$DUALSTACK_FOCUS E2E_SKIP=$DUALSTACK_SKIP e2e >"$out/e2e-dualstack-$PROXY.log" 2>&1 || true
	suite "dualstack-$PROXY"
}

case "${1:-}" in
up) up ;;
down) down ;;
smoke) smoke ;;
e2e) e2e ;;
report) report ;;
compare) compare "$2" "$3" "${4:-}" "${5:-}" ;;
all) all ;;
rollout) rollout ;;
swap) swap ;;
storm) storm ;;
conformance) conformance ;;
nodecidr) nodecidr ;;
dualstack) dualstack ;;
core) core ;;
table) table "${2:-}" ;;
env) echo "KUBECONFIG=$S/admin.kubeconfig" ;;
*)
	echo "usage: $0 up|smoke|rollout|swap|e2e|storm|nodecidr|dualstack|core|report|compare|table|all|conformance|down|env" >&2
	exit 2
	;;
esac
