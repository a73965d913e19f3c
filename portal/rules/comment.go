package rules

import "strings"

// Comment makes ServicePort safe for an nftables or iptables comment.
func Comment(s string) string {
	const max = 100
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s) && len(b) < max; i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', strings.IndexByte("/:._-", c) >= 0:
			b = append(b, c)
		default:
			b = append(b, '_')
		}
	}
	return string(b)
}
