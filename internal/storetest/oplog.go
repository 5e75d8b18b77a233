package storetest

import (
	"fmt"
	"sync"
	"testing"

	"github.com/lockstep-hq/lockstep"
)

func seqs(es []*lockstep.OpEntry) []int64 {
	out := []int64{}
	for _, e := range es {
		out = append(out, e.Seq)
	}
	return out
}

func wantSeqs(t *testing.T, what string, es []*lockstep.OpEntry, want ...int64) {
	t.Helper()
	got := seqs(es)
	if fmt.Sprint(got) != fmt.Sprint(append([]int64{}, want...)) {
		t.Fatalf("%s: seqs %v, want %v", what, got, want)
	}
}

func opTests() map[string]test {
	return map[string]test{
		"AppendOp": func(t *testing.T, s lockstep.Store) {
			var prev string
			for i := 1; i <= 3; i++ {
				e := ent("test.op")
				e.Repo = "r"
				e.Refs = []lockstep.RefMove{{Repo: "r", Ref: "refs/heads/main", Old: lockstep.ZeroOID, New: oid(i)}}
				e.Details = map[string]any{"i": i, "nested": map[string]any{"b": 1, "a": "x"}}
				must(t, s.AppendOp(bg, e))
				if e.Seq != int64(i) || e.PrevHash != prev || e.Hash == "" || e.Hash == prev || e.ID == "" {
					t.Fatalf("entry %d: seq %d prev %q hash %q id %q", i, e.Seq, e.PrevHash, e.Hash, e.ID)
				}
				prev = e.Hash
			}
			// Stored as given: a read returns the same fields and hash.
			got, err := s.ListOps(bg, lockstep.OpFilter{})
			must(t, err)
			if len(got) != 3 || got[2].Hash != prev || got[2].Refs[0].New != oid(3) || got[2].Repo != "r" || got[2].KeyName != "suite" {
				t.Fatalf("read back: %+v", got)
			}
			wantChain(t, s, 3)
		},
		"AppendOp/concurrent": func(t *testing.T, s lockstep.Store) {
			// Concurrent appends form one linear chain: distinct seqs 1..n,
			// each entry linked to the one before.
			const n = 64
			var wg sync.WaitGroup
			errs := make(chan error, n)
			for i := 0; i < n; i++ {
				wg.Add(1)
				go func(i int) {
					defer wg.Done()
					e := ent("concurrent")
					e.Details = map[string]any{"i": i}
					errs <- s.AppendOp(bg, e)
				}(i)
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				must(t, err)
			}
			all, err := s.ListOps(bg, lockstep.OpFilter{Limit: 1000})
			must(t, err)
			if len(all) != n {
				t.Fatalf("%d entries, want %d", len(all), n)
			}
			for i, e := range all {
				if e.Seq != int64(i+1) || (i > 0 && e.PrevHash != all[i-1].Hash) {
					t.Fatalf("entry %d: seq %d, prev %q (previous hash %q)", i, e.Seq, e.PrevHash, all[max(i-1, 0)].Hash)
				}
			}
			wantChain(t, s, n)
		},
		"ListOps": func(t *testing.T, s lockstep.Store) {
			// seq: 1 r0/k0/a, 2 r1/k1/b, 3 r0/k0/b, 4 r1/k1/a, 5 r0/k0/a, 6 r1/k1/b
			for i := 0; i < 6; i++ {
				e := &lockstep.OpEntry{Repo: fmt.Sprintf("r%d", i%2), KeyID: fmt.Sprintf("k%d", i%2), KeyName: "suite", Op: []string{"a", "b", "b", "a", "a", "b"}[i]}
				must(t, s.AppendOp(bg, e))
			}
			list := func(f lockstep.OpFilter) []*lockstep.OpEntry {
				t.Helper()
				out, err := s.ListOps(bg, f)
				must(t, err)
				return out
			}
			wantSeqs(t, "all, oldest first", list(lockstep.OpFilter{}), 1, 2, 3, 4, 5, 6)
			wantSeqs(t, "repo", list(lockstep.OpFilter{Repo: "r1"}), 2, 4, 6)
			wantSeqs(t, "key", list(lockstep.OpFilter{KeyID: "k0"}), 1, 3, 5)
			wantSeqs(t, "op", list(lockstep.OpFilter{Op: "a"}), 1, 4, 5)
			wantSeqs(t, "repo and op", list(lockstep.OpFilter{Repo: "r0", Op: "a"}), 1, 5)
			wantSeqs(t, "after", list(lockstep.OpFilter{After: 4}), 5, 6)
			wantSeqs(t, "after and limit", list(lockstep.OpFilter{After: 1, Limit: 2}), 2, 3)
			wantSeqs(t, "newest first", list(lockstep.OpFilter{Newest: true}), 6, 5, 4, 3, 2, 1)
			wantSeqs(t, "newest first before 4", list(lockstep.OpFilter{Newest: true, After: 4}), 3, 2, 1)
			wantSeqs(t, "newest first, limit", list(lockstep.OpFilter{Newest: true, Limit: 2}), 6, 5)
			wantSeqs(t, "newest first, op", list(lockstep.OpFilter{Newest: true, Op: "b"}), 6, 3, 2)
			wantSeqs(t, "nothing matches", list(lockstep.OpFilter{Repo: "none"}))
			// Paging by After visits every entry once.
			var paged []*lockstep.OpEntry
			for after := int64(0); ; {
				page := list(lockstep.OpFilter{After: after, Limit: 4})
				if len(page) == 0 {
					break
				}
				paged = append(paged, page...)
				after = page[len(page)-1].Seq
			}
			wantSeqs(t, "paged", paged, 1, 2, 3, 4, 5, 6)
		},
		"VerifyOps": func(t *testing.T, s lockstep.Store) {
			res, err := s.VerifyOps(bg)
			must(t, err)
			if !res.OK || res.Entries != 0 || res.FirstBad != nil {
				t.Fatalf("empty log: %+v", res)
			}
			for i := 0; i < 4; i++ {
				must(t, s.AppendOp(bg, ent("x")))
			}
			// Entries appended inside other operations' transactions are
			// part of the same chain.
			mustRepo(t, s, "base", "")
			wantChain(t, s, 5)
		},
	}
}
