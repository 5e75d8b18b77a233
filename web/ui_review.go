package web

// Review aids of the UI (issue 27, items 11–13): merge conflicts with
// their hunks, how a workspace landed, restore commits told apart from
// attempts, syntax-highlighted and split diffs, and a workspace timeline.
// Highlighting is done on the server by chroma into class names; the
// colours come from /ui/highlight.css (same origin, as the CSP requires).

import (
	"context"
	"html/template"
	"net/http"
	"net/url"
	"strings"

	"github.com/alecthomas/chroma/v2"
	"github.com/gin-gonic/gin"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/gate"
	"github.com/lockstep-hq/lockstep/merge"
	"github.com/lockstep-hq/lockstep/repositories"
	"github.com/lockstep-hq/lockstep/web/syntax"
	"github.com/lockstep-hq/lockstep/workspaces"
)

// isRestoreOp: commits written by a checkpoint restore or a rollback undo
// work; they are not attempts of the agent.
func isRestoreOp(op string) bool { return op == "rollback" || op == "checkpoint.restore" }

// --- conflicts ------------------------------------------------------------

type conflictView struct {
	merge.Conflict
	Views []hunkView
}

type hunkView struct {
	merge.Hunk
	Markers string // the hunk as git's diff3 conflict markers show it
}

func conflictViews(cs []merge.Conflict, ours, theirs string) []conflictView {
	out := make([]conflictView, 0, len(cs))
	for _, c := range cs {
		v := conflictView{Conflict: c}
		for _, h := range c.Hunks {
			v.Views = append(v.Views, hunkView{Hunk: h, Markers: markers(h.Content, ours, theirs)})
		}
		out = append(out, v)
	}
	return out
}

func markers(c merge.HunkContent, ours, theirs string) string {
	var b strings.Builder
	side := func(s string) {
		b.WriteString(s)
		if s != "" && !strings.HasSuffix(s, "\n") {
			b.WriteByte('\n')
		}
	}
	b.WriteString("<<<<<<< " + ours + "\n")
	side(c.Ours)
	b.WriteString("||||||| base\n")
	side(c.Base)
	b.WriteString("=======\n")
	side(c.Theirs)
	b.WriteString(">>>>>>> " + theirs + "\n")
	return b.String()
}

// conflictsData is what the "conflicts" partial shows.
type conflictsData struct {
	Ours, Theirs string
	Conflicts    []conflictView
	Error        string
}

// workspaceConflicts runs the promote preflight (in memory, deep) of the
// workspace's tip into its base branch; only called when the gate saw
// the merge as not clean.
func (u *uiServer) workspaceConflicts(ctx context.Context, c *gin.Context, info *repositories.RepoInfo) *conflictsData {
	d := &conflictsData{Ours: info.ForkOf + ":" + info.DefaultBranch, Theirs: info.Name}
	t, err := u.s.Gate.Target(ctx, info.Name, "")
	var res *merge.Result
	if err == nil {
		res, err = u.s.Gate.PromotePreflight(ctx, t)
	}
	if err != nil {
		d.Error = publicMessage(c, err)
		return d
	}
	if res.Clean {
		return nil
	}
	d.Conflicts = conflictViews(res.Conflicts, d.Ours, d.Theirs)
	return d
}

// compareConflicts merges head into base in memory (deep, nothing
// written): what a merge of the compared revisions would conflict on.
func (u *uiServer) compareConflicts(ctx context.Context, c *gin.Context, r *lockstep.Repo, baseRev, headRev string) *conflictsData {
	d := &conflictsData{Ours: baseRev, Theirs: headRev}
	bh, err := u.s.Repos.Resolve(ctx, r, baseRev)
	if err != nil {
		return nil // the diff above already says what is wrong
	}
	hh, err := u.s.Repos.Resolve(ctx, r, headRev)
	if err != nil {
		return nil
	}
	n, err := u.s.Repos.Network(r.Network)
	var res *merge.Result
	if err == nil {
		res, err = merge.Merge(ctx, merge.NewOverlay(n.Objects()), bh, hh, u.s.Repos.MergeOptions(true))
	}
	if err != nil {
		d.Error = publicMessage(c, err)
		return d
	}
	if res.Clean {
		return nil
	}
	d.Conflicts = conflictViews(res.Conflicts, d.Ours, d.Theirs)
	return d
}

// --- how a workspace landed -----------------------------------------------

// landing is the base's promote entry of a promoted workspace.
type landing struct {
	*lockstep.OpEntry
	Mode, Into, Landed string
}

// uiPromoteScan bounds how many promote entries of the base are searched
// for the workspace's.
const uiPromoteScan = 200

func (u *uiServer) landing(ctx context.Context, info *repositories.RepoInfo) (*landing, error) {
	es, err := u.s.Store.ListOps(ctx, lockstep.OpFilter{Repo: info.ForkOf, Op: "promote", Newest: true, Limit: uiPromoteScan})
	if err != nil {
		return nil, err
	}
	for _, e := range es {
		if ws, _ := e.Details["workspace"].(string); ws != info.Name {
			continue
		}
		l := &landing{OpEntry: e}
		l.Mode, _ = e.Details["mode"].(string)
		if l.Mode == "" {
			l.Mode = "merge"
		}
		for _, m := range e.Refs {
			l.Into, l.Landed = m.Repo+":"+strings.TrimPrefix(m.Ref, "refs/heads/"), m.New
		}
		return l, nil
	}
	return nil, nil
}

// --- timeline -------------------------------------------------------------

// uiTimeline is how many operations the workspace timeline shows.
const uiTimeline = 100

type timelineItem struct {
	*lockstep.OpEntry
	Kind   string // push, run, check, restore, promote, other: the CSS class
	Label  string
	Commit string
}

func timelineKind(op string) (kind, label string) {
	switch {
	case op == "push" || op == "git.push" || op == "edit" || op == "merge":
		return "push", "pushed"
	case strings.HasPrefix(op, "run."):
		return "run", "run " + strings.TrimPrefix(op, "run.")
	case strings.HasPrefix(op, "check"):
		if op == "checkpoint" {
			return "other", "checkpoint"
		}
		if op == "checkpoint.restore" {
			return "restore", "restore commit"
		}
		if op == "checkpoint.restored" {
			return "restore", "restored a checkpoint"
		}
		return "check", "check"
	case op == "rollback":
		return "restore", "rolled back"
	case op == "workspace.promoted" || op == "promote":
		return "promote", "promoted"
	case strings.HasPrefix(op, "effect"):
		return "effect", op
	}
	return "other", op
}

func (u *uiServer) timeline(ctx context.Context, name string) ([]timelineItem, error) {
	es, err := u.s.Store.ListOps(ctx, lockstep.OpFilter{Repo: name, Newest: true, Limit: uiTimeline})
	if err != nil {
		return nil, err
	}
	out := make([]timelineItem, 0, len(es))
	for _, e := range es {
		if e.ReadOnly {
			continue
		}
		it := timelineItem{OpEntry: e}
		it.Kind, it.Label = timelineKind(e.Op)
		if e.Op == "promote" && e.Result != "ok" {
			it.Label = "promote refused"
		}
		if s, ok := e.Details["name"].(string); ok && it.Kind == "check" {
			st, _ := e.Details["status"].(string)
			it.Label = "check " + s + " " + st
		}
		for _, m := range e.Refs {
			if m.Repo == name && m.New != "" && m.New != lockstep.ZeroOID {
				it.Commit = m.New
			}
		}
		if it.Commit == "" {
			if s, ok := e.Details["commit"].(string); ok && lockstep.IsOID(s) {
				it.Commit = s
			}
		}
		out = append(out, it)
	}
	return out, nil
}

// --- highlighting and the split view ---------------------------------------

// handleHighlightCSS serves chroma's "github" style, generated into
// web/syntax (chroma's styles package is not linked: see there).
func (u *uiServer) handleHighlightCSS(c *gin.Context) {
	c.Header("Cache-Control", "public, max-age=300")
	c.Data(http.StatusOK, "text/css; charset=utf-8", syntax.CSS)
}

// lexerFor picks a lexer by file name; nil when none fits (plain text).
func lexerFor(path string) chroma.Lexer {
	l := syntax.Match(path)
	if l == nil {
		return nil
	}
	return chroma.Coalesce(l)
}

// highlight renders one line of code as escaped HTML with chroma's class
// names. Lines are highlighted alone (a diff shows fragments), so a
// construct spanning lines may be coloured as plain text.
func highlight(l chroma.Lexer, code string) template.HTML {
	if l == nil || code == "" {
		return ""
	}
	it, err := l.Tokenise(nil, code)
	if err != nil {
		return ""
	}
	var b strings.Builder
	for tok := it(); tok != chroma.EOF; tok = it() {
		v := strings.TrimSuffix(tok.Value, "\n")
		if v == "" {
			continue
		}
		cls := chroma.StandardTypes[tok.Type]
		if cls == "" {
			b.WriteString(template.HTMLEscapeString(v))
			continue
		}
		b.WriteString(`<span class="` + cls + `">` + template.HTMLEscapeString(v) + `</span>`)
	}
	return template.HTML(b.String()) // #nosec: every token is escaped above
}

// highlightLines sets the HTML of every code line of a file's diff.
func highlightLines(path string, lines []diffLine) {
	l := lexerFor(path)
	if l == nil {
		return
	}
	for i := range lines {
		switch lines[i].Class {
		case "add", "del", "ctx":
			if len(lines[i].Text) > 0 {
				lines[i].HTML = highlight(l, lines[i].Text[1:])
			}
		}
	}
}

// splitRow is one row of the side-by-side view: the old line left, the
// new right (either may be empty).
type splitRow struct {
	Class       string // hunk, meta or "" for code
	Left, Right *diffLine
}

// splitLines pairs a run of deleted lines with the added lines that
// follow it; context lines show on both sides.
func splitLines(lines []diffLine) []splitRow {
	var out []splitRow
	for i := 0; i < len(lines); {
		l := &lines[i]
		switch l.Class {
		case "hunk", "meta":
			out = append(out, splitRow{Class: l.Class, Left: l})
			i++
		case "ctx":
			out = append(out, splitRow{Left: l, Right: l})
			i++
		default:
			var dels, adds []*diffLine
			for i < len(lines) && lines[i].Class == "del" {
				dels = append(dels, &lines[i])
				i++
			}
			for i < len(lines) && lines[i].Class == "add" {
				adds = append(adds, &lines[i])
				i++
			}
			for k := 0; k < len(dels) || k < len(adds); k++ {
				var r splitRow
				if k < len(dels) {
					r.Left = dels[k]
				}
				if k < len(adds) {
					r.Right = adds[k]
				}
				out = append(out, r)
			}
		}
	}
	return out
}

// viewURLs sets the unified/split toggle links of a diff from the page's
// own URL (?view=split).
func viewURLs(d *diffData, u *url.URL) {
	q := u.Query()
	d.Split = q.Get("view") == "split"
	q.Del("view")
	d.UnifiedURL = u.Path + "?" + q.Encode()
	q.Set("view", "split")
	d.SplitURL = u.Path + "?" + q.Encode()
	if d.Split {
		for i := range d.Files {
			d.Files[i].Rows = splitLines(d.Files[i].Lines)
		}
	}
}

// rolledBack: the workspace's latest attempt restored a tree and nothing
// is left to land.
func rolledBack(as []checkedAttempt, ev *gate.Evaluation) bool {
	return ev != nil && ev.ChangedFiles == 0 && len(as) > 0 && isRestoreOp(as[0].Op)
}

// ruleList reads a list of gate reasons ({"rule": …, "message": …}) as
// "rule: message" lines; false for any other list.
func ruleList(v []any) ([]string, bool) {
	if len(v) == 0 {
		return nil, false
	}
	out := make([]string, 0, len(v))
	for _, x := range v {
		m, ok := x.(map[string]any)
		if !ok {
			return nil, false
		}
		rule, ok1 := m["rule"].(string)
		msg, ok2 := m["message"].(string)
		if !ok1 || !ok2 {
			return nil, false
		}
		out = append(out, rule+": "+msg)
	}
	return out, true
}

// uiRestoreScan is how many of a workspace's newest attempts are read to
// leave its restore commits out of its attempt count.
const uiRestoreScan = 200

// agentAttempts counts a workspace's attempts without the commits of
// restores and rollbacks (at is newest first; restores older than the
// window still count).
func agentAttempts(at []lockstep.Attempt) int64 {
	n := at[0].Number
	for _, a := range at {
		if isRestoreOp(a.Op) {
			n--
		}
	}
	return n
}

// noNetChange finds the workspaces of a listing that are ahead of their
// base only by commits that were rolled back: the tip's tree is the tree
// of the commit they were forked at.
func (u *uiServer) noNetChange(ctx context.Context, wss []workspaces.WorkspaceInfo) map[string]bool {
	out := map[string]bool{}
	for _, ws := range wss {
		if ws.Ahead == 0 || ws.Tip == "" || ws.BaseCommit == "" {
			continue
		}
		tip, err := u.s.Repos.Commit(ctx, ws.Name, ws.Tip)
		if err != nil {
			continue
		}
		fork, err := u.s.Repos.Commit(ctx, ws.Name, ws.BaseCommit)
		if err == nil && tip.Tree == fork.Tree {
			out[ws.Name] = true
		}
	}
	return out
}
