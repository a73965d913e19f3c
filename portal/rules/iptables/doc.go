// Package iptables is the iptables portal mode (Linux, for hosts without
// nftables): kube-proxy userspace's KUBE-PORTALS-* and KUBE-NODEPORT-*
// chains, programmed with iptables-restore and ip6tables-restore. See Rules;
// testdata/ holds what it feeds iptables-restore as golden text.
package iptables
