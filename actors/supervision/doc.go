// Package supervision is the restart strategy of every kproxy actor tree:
// the node proxy's (package actors) and the core's and backends' (package
// actors/remote). It depends on protoactor only, so both can share it.
package supervision
