package sqlstore

import (
	"context"
	"database/sql"
	"sync"

	"github.com/lockstep-hq/lockstep"
)

// Tasks lists the distinct task labels of a base's workspaces, by name,
// at most limit of them after the label after, with the number of
// workspaces in each status. Two indexed queries whatever the number of
// workspaces: the page of labels (repos_fork_task), then the counts of
// those labels.
func (s *DB) Tasks(ctx context.Context, forkOf, after string, limit int) (out []lockstep.TaskCount, err error) {
	ctx, span := s.start(ctx, "Tasks")
	defer func() { err = end(span, err) }()
	if limit <= 0 || limit > 1000 {
		limit = 100
	}
	rows, err := s.db.QueryContext(ctx, `SELECT task, status, COUNT(*) FROM repos
		WHERE fork_of = $1 AND task IN (SELECT DISTINCT task FROM repos WHERE fork_of = $1 AND task > $2 ORDER BY task LIMIT $3)
		GROUP BY task, status ORDER BY task`, forkOf, after, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var task, status string
		var n int
		if err := rows.Scan(&task, &status, &n); err != nil {
			return nil, err
		}
		if len(out) == 0 || out[len(out)-1].Task != task {
			out = append(out, lockstep.TaskCount{Task: task, ByStatus: map[string]int{}})
		}
		t := &out[len(out)-1]
		t.ByStatus[status] += n
		t.Total += n
	}
	return out, rows.Err()
}

// OnOp registers fn to be called with every oplog entry once the
// transaction that appended it has committed (live updates publish from
// here: every operation of every service appends through this store).
// fn runs on the appender's goroutine and must not block.
func (s *DB) OnOp(fn func(lockstep.OpEntry)) {
	s.hooks.mu.Lock()
	defer s.hooks.mu.Unlock()
	s.hooks.fns = append(s.hooks.fns, fn)
}

// opHooks holds the OnOp callbacks and the entries appended by open
// transactions, delivered when they commit.
type opHooks struct {
	mu      sync.Mutex
	fns     []func(lockstep.OpEntry)
	pending sync.Map // *sql.Tx → *[]lockstep.OpEntry
}

func (h *opHooks) add(tx *sql.Tx, e *lockstep.OpEntry) {
	h.mu.Lock()
	n := len(h.fns)
	h.mu.Unlock()
	if n == 0 {
		return
	}
	v, _ := h.pending.LoadOrStore(tx, &[]lockstep.OpEntry{})
	l := v.(*[]lockstep.OpEntry)
	*l = append(*l, *e)
}

// deliver hands e, committed without a *sql.Tx (pgfast.go), to the
// callbacks.
func (h *opHooks) deliver(e lockstep.OpEntry) {
	h.mu.Lock()
	fns := append([]func(lockstep.OpEntry){}, h.fns...)
	h.mu.Unlock()
	for _, fn := range fns {
		fn(e)
	}
}

// done delivers (committed) or drops tx's pending entries.
func (h *opHooks) done(tx *sql.Tx, committed bool) {
	v, ok := h.pending.LoadAndDelete(tx)
	if !ok || !committed {
		return
	}
	h.mu.Lock()
	fns := append([]func(lockstep.OpEntry){}, h.fns...)
	h.mu.Unlock()
	for _, e := range *v.(*[]lockstep.OpEntry) {
		for _, fn := range fns {
			fn(e)
		}
	}
}
