package merge

import (
	"context"
	"fmt"
	"strings"
	"testing"
)

// TestRenameLimitAndOption: RenameLimit bounds only the similarity matrix
// (exact renames are always found); NoRenames turns detection off.
func TestRenameLimitAndOption(t *testing.T) {
	body := func(name string, edit bool) string {
		var b strings.Builder
		for i := 0; i < 20; i++ {
			fmt.Fprintf(&b, "%s line %d\n", name, i)
		}
		if edit {
			return strings.Replace(b.String(), "line 3\n", "line three\n", 1)
		}
		return b.String()
	}
	base := map[string]f{"a.txt": txt(body("a", false)), "b.txt": txt(body("b", false)), "c.txt": txt(body("c", false))}
	// ours: a and b move and change (inexact, other basenames); c moves as is.
	ours := map[string]f{"x/one.txt": txt(body("a", true)), "x/two.txt": txt(body("b", true)), "x/c2.txt": txt(body("c", false))}
	// theirs edits all three at the end.
	theirs := map[string]f{}
	for p, v := range base {
		theirs[p] = txt(v.data + "theirs\n")
	}
	s, o, th := scenario(t, base, ours, theirs)
	ctx := context.Background()

	res, err := Merge(ctx, s, o, th, Options{Deep: true})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Clean {
		t.Fatalf("default: want clean (renames followed), got %+v", res.Conflicts)
	}
	got := readFiles(t, s, res.Tree)
	if len(got) != 3 || !strings.HasSuffix(got["x/one.txt"].data, "theirs\n") || !strings.Contains(got["x/one.txt"].data, "line three") ||
		!strings.HasSuffix(got["x/c2.txt"].data, "theirs\n") {
		t.Errorf("default: merged tree %v", got)
	}

	// Limit 1: 2 sources x 2 destinations > 1: the inexact ones are
	// delete/modify conflicts; the exact one is still followed.
	res, err = Merge(ctx, NewOverlay(s), o, th, Options{Deep: true, RenameLimit: 1})
	if err != nil {
		t.Fatal(err)
	}
	if res.Clean || strings.Join(conflictPaths(res), ",") != "a.txt,b.txt" {
		t.Errorf("limit 1: want modify-delete at a.txt and b.txt, got clean=%v %+v", res.Clean, res.Conflicts)
	}

	res, err = Merge(ctx, NewOverlay(s), o, th, Options{Deep: true, NoRenames: true})
	if err != nil {
		t.Fatal(err)
	}
	if res.Clean || strings.Join(conflictPaths(res), ",") != "a.txt,b.txt,c.txt" {
		t.Errorf("no renames: want modify-delete everywhere, got clean=%v %+v", res.Clean, res.Conflicts)
	}
	for _, c := range res.Conflicts {
		if c.Kind != KindModifyDelete {
			t.Errorf("no renames: %+v", c)
		}
	}
}
