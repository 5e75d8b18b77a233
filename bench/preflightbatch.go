package bench

// The preflight-batch group (issue #26 row "deep preflight, amortized per
// merge"): 50 real branches of a bundle's history merged in memory into
// one base, five ways interleaved in every round: 50 single deep
// preflights with and without an Idempotency-Key, one batch request, one
// `git merge-tree --stdin` process and 50 `git merge-tree --write-tree`
// processes. Times are per merge.

import (
	"bytes"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"

	"github.com/lockstep-hq/lockstep/api"
	"github.com/lockstep-hq/lockstep/client"
)

// preflightBatchMerges is how many branches the group merges into its
// base: the second parents of the default branch's newest first-parent
// merges; the base is the first parent of the next older one.
const preflightBatchMerges = 50

// preflightBatchRows are the rows of the group (when a bundle qualifies).
var preflightBatchRows = []string{"preflight-batch", "preflight-single"}

// PreflightBatchRowNames are the rows the preflight-batch group prints
// when it runs with a bundle that qualifies (Options.Objstore.Bundles:
// one whose default branch has at least 51 first-parent merges);
// without one it prints one skipped row, "preflight-batch".
func PreflightBatchRowNames() []string { return slices.Clone(preflightBatchRows) }

// mergeOutcome is what one way says of one merge: clean or not, and the
// merged tree when clean.
type mergeOutcome struct {
	clean bool
	tree  string
}

// pfbSetup is the group's world: the repository, its 50 workspaces, the
// mirror clone git runs in and the 50 (base, branch) pairs.
type pfbSetup struct {
	bundle, src, repo string
	base              string
	branches          []string // second parents, newest merge first
	names             []string // workspaces, one per branch
	stdin             []byte   // "BASE BRANCH\n" × 50 for merge-tree --stdin
	size              string
}

// pfbBundle finds the first bundle whose default branch has enough
// first-parent merges and mirror-clones it; nil, nil when none does
// (reason says why).
func (b *bencher) pfbBundle() (st *pfbSetup, reason string, err error) {
	bundles := b.o.objstore.Bundles
	if len(bundles) == 0 {
		return nil, "no bundles given (--bundles, LOCKSTEP_BENCH_BUNDLES; e.g. /work/shared/corpus/echo.bundle)", nil
	}
	need := preflightBatchMerges + 1
	for _, bundle := range bundles {
		src := b.path("pfb-src-" + bundleName(bundle) + ".git")
		if _, err := b.git(b.root, "clone", "-q", "--mirror", bundle, src); err != nil {
			return nil, "", err
		}
		head, err := b.git(src, "symbolic-ref", "HEAD")
		if err != nil {
			return nil, "", err
		}
		out, err := b.git(src, "rev-list", "--first-parent", "--merges", "--parents", "-n", fmt.Sprint(need), head)
		if err != nil {
			return nil, "", err
		}
		var p2 []string
		base := ""
		for _, l := range strings.Split(out, "\n") {
			f := strings.Fields(l)
			if len(f) < 3 {
				continue
			}
			if len(p2) == preflightBatchMerges {
				base = f[1]
				break
			}
			p2 = append(p2, f[2])
		}
		if base == "" {
			b.logf("preflight-batch: %s: %d first-parent merges on %s, want %d", bundleName(bundle), len(p2), head, need)
			os.RemoveAll(src)
			continue
		}
		st := &pfbSetup{bundle: bundle, src: src, base: base, branches: p2, repo: b.name("pfb-" + bundleName(bundle))}
		var stdin bytes.Buffer
		for _, c := range p2 {
			fmt.Fprintf(&stdin, "%s %s\n", base, c)
		}
		st.stdin = stdin.Bytes()
		st.size = fmt.Sprintf("%s: the second parents of %s's %d newest first-parent merges into the first parent of the next older one (%s)",
			bundleName(bundle), strings.TrimPrefix(head, "refs/heads/"), preflightBatchMerges, short(base))
		return st, "", nil
	}
	return nil, fmt.Sprintf("no bundle among --bundles (LOCKSTEP_BENCH_BUNDLES) has %d first-parent merges on its default branch (e.g. /work/shared/corpus/echo.bundle)", need), nil
}

// pfbPush creates the repository at the base commit (the bundle's
// default branch as "upstream", so that every object is in the network)
// and one workspace per branch at that branch, over HTTP with git.
func (b *bencher) pfbPush(s *benchServer, st *pfbSetup) error {
	if _, err := s.c.CreateRepo(b.ctx, st.repo, "main"); err != nil {
		return err
	}
	remote := func(repo string) string {
		u, _ := url.Parse(s.url + "/git/" + repo + ".git")
		u.User = url.UserPassword("x", s.key)
		return u.String()
	}
	if _, err := b.git(st.src, "push", "-q", remote(st.repo), st.base+":refs/heads/main", "HEAD:refs/heads/upstream"); err != nil {
		return err
	}
	for i, c := range st.branches {
		name := fmt.Sprintf("%s-ws%02d", st.repo, i)
		if _, err := s.c.ForkTask(b.ctx, st.repo, name, st.repo); err != nil {
			return err
		}
		if _, err := b.git(st.src, "push", "-q", "--force", remote(name), c+":refs/heads/main"); err != nil {
			return err
		}
		st.names = append(st.names, name)
	}
	return nil
}

// mergeTree runs git merge-tree in dir; exit status 1 (conflicts) is an
// answer, not an error.
func (b *bencher) mergeTree(dir string, stdin []byte, args ...string) (out []byte, clean bool, err error) {
	c := b.cmd(dir, "git", append([]string{"merge-tree"}, args...)...)
	if stdin != nil {
		c.Stdin = bytes.NewReader(stdin)
	}
	var stderr bytes.Buffer
	c.Stderr = &stderr
	out, err = c.Output()
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.ExitCode() == 1 {
		return out, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("git merge-tree %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out, true, nil
}

// parseMergeTreeStdin reads `git merge-tree --stdin --write-tree
// --name-only --no-messages -z`: per merge "STATUS\0TREE\0", the
// conflicted paths each followed by \0, then an empty field.
func parseMergeTreeStdin(out []byte) ([]mergeOutcome, error) {
	f := strings.Split(string(out), "\x00")
	var res []mergeOutcome
	for i := 0; i < len(f); {
		if f[i] == "" && i == len(f)-1 {
			break
		}
		if i+1 >= len(f) || (f[i] != "0" && f[i] != "1") {
			return nil, fmt.Errorf("merge-tree --stdin output: field %d is %q, want a status", i, f[i])
		}
		m := mergeOutcome{clean: f[i] == "1", tree: f[i+1]}
		i += 2
		for i < len(f) && f[i] != "" {
			i++ // a conflicted path
		}
		i++ // the empty field ending the merge
		res = append(res, m)
	}
	return res, nil
}

// benchPreflightBatch: see the file comment.
func (b *bencher) benchPreflightBatch() error {
	st, reason, err := b.pfbBundle()
	if err != nil {
		return err
	}
	if st == nil {
		b.logf("preflight-batch: skipped: %s", reason)
		b.skip("preflight-batch", reason)
		return nil
	}
	s, err := b.server(true)
	if err != nil {
		return err
	}
	t0 := time.Now()
	if err := b.pfbPush(s, st); err != nil {
		return fmt.Errorf("set up %s: %w", st.repo, err)
	}
	b.logf("  preflight-batch: %s and %d workspaces pushed in %s", st.repo, len(st.names), time.Since(t0).Round(time.Millisecond))

	n := float64(len(st.names))
	unkeyed := *s.c
	unkeyed.NoIdempotencyKeys = true
	const (
		wKeyed = iota
		wUnkeyed
		wBatch
		wStdin
		wProcs
		nWays
	)
	wayNames := [nWays]string{"50 single keyed POST /merges", "50 single unkeyed POST /merges", "one POST /merges/preflight", "git merge-tree --stdin", "50 git merge-tree --write-tree processes"}
	var ms, handler [nWays][]float64 // per merge, recorded rounds
	var outcomes [nWays][]mergeOutcome
	var batchInner []float64
	single := func(c *client.Client) ([]mergeOutcome, error) {
		out := make([]mergeOutcome, 0, len(st.names))
		for _, name := range st.names {
			m, err := c.MergeBranches(b.ctx, st.repo, client.MergeRequest{Ours: "main", Theirs: name + ":main", Preflight: true, Deep: true})
			if err != nil {
				return nil, fmt.Errorf("preflight of %s: %w", name, err)
			}
			out = append(out, mergeOutcome{clean: m.Clean, tree: m.Tree})
		}
		return out, nil
	}
	// way runs one way once and returns its wall time (git's output is
	// parsed after the clock stops).
	way := func(w int) (out []mergeOutcome, d time.Duration, err error) {
		t := time.Now()
		switch w {
		case wKeyed:
			out, err = single(s.c)
			d = time.Since(t)
		case wUnkeyed:
			out, err = single(&unkeyed)
			d = time.Since(t)
		case wBatch:
			var res *api.PreflightBatchResponse
			res, err = s.c.PreflightBatch(b.ctx, st.repo, api.PreflightBatchRequest{Workspaces: st.names, Deep: true})
			d = time.Since(t)
			if err != nil {
				return nil, 0, err
			}
			batchInner = append(batchInner, res.DurationMS/n)
			for _, it := range res.Results {
				if it.Result == nil {
					return nil, 0, fmt.Errorf("%s: %+v", it.Workspace, it.Error)
				}
				out = append(out, mergeOutcome{clean: it.Result.Clean, tree: it.Result.Tree})
			}
		case wStdin:
			var raw []byte
			raw, _, err = b.mergeTree(st.src, st.stdin, "--stdin", "--write-tree", "--name-only", "--no-messages", "-z")
			d = time.Since(t)
			if err == nil {
				out, err = parseMergeTreeStdin(raw)
			}
		case wProcs:
			raws := make([][]byte, 0, len(st.branches))
			cleans := make([]bool, 0, len(st.branches))
			for _, c := range st.branches {
				raw, clean, err := b.mergeTree(st.src, nil, "--write-tree", st.base, c)
				if err != nil {
					return nil, 0, err
				}
				raws, cleans = append(raws, raw), append(cleans, clean)
			}
			d = time.Since(t)
			for i, raw := range raws {
				tree, _, _ := strings.Cut(string(raw), "\n")
				out = append(out, mergeOutcome{clean: cleans[i], tree: strings.TrimSpace(tree)})
			}
		}
		if err == nil && len(out) != len(st.names) {
			err = fmt.Errorf("%d answers for %d merges", len(out), len(st.names))
		}
		return out, d, err
	}
	const warm = 1
	rounds := b.o.iters
	load0 := loadAvg()
	for r := 0; r < warm+rounds; r++ {
		if err := b.ctx.Err(); err != nil {
			return err
		}
		for k := 0; k < nWays; k++ {
			w := (k + r) % nWays
			s.timer.reset()
			out, d, err := way(w)
			if err != nil {
				return fmt.Errorf("%s: %w", wayNames[w], err)
			}
			_, total, _ := s.timer.read()
			if r == 0 {
				outcomes[w] = out
			}
			if r >= warm {
				ms[w] = append(ms[w], float64(d.Microseconds())/1000/n)
				handler[w] = append(handler[w], float64(total.Microseconds())/1000/n)
			}
		}
		if r == 0 {
			if err := pfbAgree(st, wayNames[:], outcomes[:], wStdin); err != nil {
				return err
			}
		}
	}
	load1 := loadAvg()

	clean, sameTree := 0, 0
	for i, o := range outcomes[wStdin] {
		if o.clean {
			clean++
			if outcomes[wBatch][i].tree == o.tree {
				sameTree++
			}
		}
	}
	d := func(w int) *dist { return newDist(ms[w]) }
	mmm := func(x *dist) string { return fmt.Sprintf("%.3f–%.3f–%.3f", x.Min, x.Median, x.Max) }
	hmed := func(w int) float64 { return newDist(handler[w]).Median }
	gitCmd := "git merge-tree --stdin --write-tree --name-only --no-messages -z (one process for the 50 pairs), ms per merge"
	agree := fmt.Sprintf("all five ways agree on which merges are clean (%d of %d clean, checked in the warm-up round); for %d of the %d clean ones the batch's tree is git's", clean, len(st.names), sameTree, clean)
	roundsNote := fmt.Sprintf("%d recorded rounds after %d warm-up, the five ways in rotating order each round; ms per merge = a way's time in a round / %d; 1-minute load average %s at the start, %s at the end", rounds, warm, len(st.names), load0, load1)

	br := b.add(&benchRow{Name: "preflight-batch", Size: st.size, LS: d(wBatch), Git: d(wStdin), GitCmd: gitCmd, Target: "≤ 1.5× git merge-tree --stdin"})
	br.check(fmt.Sprintf("%.2f× git merge-tree --stdin", d(wBatch).Median/d(wStdin).Median), d(wBatch).Median <= 1.5*d(wStdin).Median)
	br.note("one POST /repos/%s/merges/preflight {workspaces: the 50, deep} (keyed, as the Go client sends it), ms per merge min–median–max %s; git --stdin %s", st.repo, mmm(d(wBatch)), mmm(d(wStdin)))
	br.note("server handler (in-process timer) median %.3f ms per merge; server-reported duration_ms median %.3f per merge", hmed(wBatch), newDist(batchInner[warm:]).Median)
	br.note("%s", agree)
	br.note("%s", roundsNote)

	sr := b.add(&benchRow{Name: "preflight-single", Size: st.size, LS: d(wKeyed), Git: d(wStdin), GitCmd: gitCmd, Target: "≤ 1.5× git merge-tree --stdin"})
	sr.check(fmt.Sprintf("%.2f× git merge-tree --stdin", d(wKeyed).Median/d(wStdin).Median), d(wKeyed).Median <= 1.5*d(wStdin).Median)
	sr.note("50 single POST /repos/%s/merges {ours: main, theirs: WS:main, preflight, deep} over one kept-alive connection, each with an Idempotency-Key (the Go client's default): min–median–max %s ms per merge; server handler median %.3f ms", st.repo, mmm(d(wKeyed)), hmed(wKeyed))
	sr.note("the same 50 without Idempotency-Key (client.Client.NoIdempotencyKeys): %s ms per merge (%.2f× git --stdin); server handler median %.3f ms", mmm(d(wUnkeyed)), d(wUnkeyed).Median/d(wStdin).Median, hmed(wUnkeyed))
	sr.note("50 separate `git merge-tree --write-tree BASE BRANCH` processes (what a per-attempt script runs): %s ms per merge; keyed single requests are %.2f× that", mmm(d(wProcs)), d(wKeyed).Median/d(wProcs).Median)
	sr.note("%s", agree)
	sr.note("%s", roundsNote)
	return nil
}

// pfbAgree checks that every way found the same merges clean.
// ref is the way the others are compared with.
func pfbAgree(st *pfbSetup, names []string, outcomes [][]mergeOutcome, ref int) error {
	for w, out := range outcomes {
		for i := range out {
			if out[i].clean != outcomes[ref][i].clean {
				return fmt.Errorf("%s says the merge of %s into %s is clean=%v, %s says clean=%v",
					names[w], short(st.branches[i]), short(st.base), out[i].clean, names[ref], outcomes[ref][i].clean)
			}
		}
	}
	return nil
}
