package gitstore

import (
	"bytes"
	"encoding/hex"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"
)

// ExpandPrefix returns up to limit distinct stored objects whose id starts
// with the lowercase hex prefix (MinAbbrev to 40 digits), in no particular
// order: one result is a unique abbreviation, two an ambiguous one. It
// binary-searches each pack's index, then lists the one loose-object
// directory the prefix names.
func (n *Network) ExpandPrefix(prefix string, limit int) []plumbing.Hash {
	if len(prefix) < MinAbbrev || len(prefix) > 40 || strings.Trim(prefix, "0123456789abcdef") != "" {
		return nil
	}
	// The smallest id with this prefix, as bytes.
	lo, _ := hex.DecodeString((prefix + strings.Repeat("0", 40))[:40])
	seen := map[plumbing.Hash]bool{}
	var out []plumbing.Hash
	add := func(h plumbing.Hash) bool {
		if !seen[h] {
			seen[h] = true
			out = append(out, h)
		}
		return len(out) >= limit
	}
	for _, p := range n.snapshot() {
		k := p.idx.FanoutMapping[lo[0]]
		if k < 0 || k >= len(p.idx.Names) {
			continue
		}
		names := p.idx.Names[k]
		count := len(names) / 20
		i := sort.Search(count, func(i int) bool { return bytes.Compare(names[i*20:i*20+20], lo) >= 0 })
		for ; i < count; i++ {
			var h plumbing.Hash
			copy(h[:], names[i*20:i*20+20])
			if !strings.HasPrefix(h.String(), prefix) {
				break
			}
			if add(h) {
				return out
			}
		}
	}
	entries, _ := os.ReadDir(filepath.Join(n.dir, "objects", prefix[:2]))
	for _, e := range entries {
		if name := prefix[:2] + e.Name(); len(name) == 40 && strings.HasPrefix(name, prefix) {
			if add(plumbing.NewHash(name)) {
				return out
			}
		}
	}
	return out
}
