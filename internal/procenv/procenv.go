// Package procenv edits process environments ("KEY=value" lists). It
// imports nothing beyond the standard library, so the lean client build
// and the egress proxy share it without linking each other.
package procenv

import "strings"

// Merge returns base with every variable of add set to add's value
// (earlier definitions of those names removed, add's order kept).
func Merge(base, add []string) []string {
	keys := map[string]bool{}
	for _, kv := range add {
		k, _, _ := strings.Cut(kv, "=")
		keys[k] = true
	}
	out := make([]string, 0, len(base)+len(add))
	for _, kv := range base {
		if k, _, _ := strings.Cut(kv, "="); !keys[k] {
			out = append(out, kv)
		}
	}
	return append(out, add...)
}

// Drop returns env without the variables named (a new list).
func Drop(env []string, names ...string) []string {
	out := make([]string, 0, len(env))
next:
	for _, kv := range env {
		for _, n := range names {
			if strings.HasPrefix(kv, n+"=") {
				continue next
			}
		}
		out = append(out, kv)
	}
	return out
}
