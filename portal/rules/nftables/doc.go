// Package nftables is the nftables portal mode (Linux): one table
// "inet kproxy" whose verdict maps redirect service traffic to each
// service port's proxy port, and reject it when a scope has no endpoints.
// See Rules for the table's layout; testdata/ holds it as golden text.
package nftables
