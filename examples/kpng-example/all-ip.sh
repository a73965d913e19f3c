#!/bin/sh
# A specialized proxier in the spirit of KPNG's pipe-exec "all-ip" example,
# run by `kproxy watch --callout`: on every change it gets kpng-json lines
# on its standard input and sends ALL traffic for each service's external
# IPs (every port and protocol) to the service's first local endpoint of
# the same family, with one nftables DNAT rule per address.
set -eu

rules=$(jq -r '
  .Service.IPs.ExternalIPs as $ext
  | ([.Endpoints[]? | select(.Local == true) | select(.IPs.V4 != null) | .IPs.V4[0]] | first) as $ep4
  | ([.Endpoints[]? | select(.Local == true) | select(.IPs.V6 != null) | .IPs.V6[0]] | first) as $ep6
  | (if $ep4 then ($ext.V4 // [])[] | "    ip daddr \(.) dnat ip to \($ep4)" else empty end),
    (if $ep6 then ($ext.V6 // [])[] | "    ip6 daddr \(.) dnat ip6 to \($ep6)" else empty end)')

# One transaction: the table is replaced as a whole, never half-written.
nft -f - <<EOF
table inet kpng_all_ip
delete table inet kpng_all_ip
table inet kpng_all_ip {
  chain prerouting {
    type nat hook prerouting priority dstnat; policy accept;
$rules
  }
}
EOF
echo "all-ip: $(printf '%s\n' "$rules" | grep -c dnat) rules"
