package main

import (
	"encoding/json"
	"strings"
)

func splitLines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.TrimSpace(l) != "" {
			out = append(out, l)
		}
	}
	return out
}

func jsonUnmarshal(line string, v any) error { return json.Unmarshal([]byte(line), v) }
