package sqlstore

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// SQLite's WAL is checkpointed (its frames copied into the database file)
// by a goroutine of the store, not by the commit that crossed SQLite's
// auto-checkpoint threshold. With auto-checkpoint (1,000 frames) the
// write whose COMMIT crossed it waited for the copy of the pages of the
// last ~100 commits. Every pool connection opens with
// wal_autocheckpoint(0), and this loop runs a PASSIVE checkpoint (it
// waits for no reader and no writer) after every ckptCommits write
// transactions and at least every ckptEvery while the store is open.
// Durability is unchanged: a commit is in the WAL before it returns, and
// closing the last connection checkpoints what is left.
const (
	ckptCommits = 100
	ckptEvery   = time.Second
)

type checkpointer struct {
	kick    chan struct{}
	stop    chan struct{}
	done    chan struct{}
	commits atomic.Int64
	once    sync.Once
}

// startCheckpointer starts the loop (SQLite only).
func (s *DB) startCheckpointer() {
	if s.dialect != "sqlite" {
		return
	}
	c := &checkpointer{kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	s.ckpt = c
	go func() {
		defer close(c.done)
		t := time.NewTicker(ckptEvery)
		defer t.Stop()
		for {
			select {
			case <-c.stop:
				return
			case <-c.kick:
			case <-t.C:
			}
			// PASSIVE never waits; a busy one is retried at the next kick or tick.
			s.db.ExecContext(context.Background(), `PRAGMA wal_checkpoint(PASSIVE)`)
		}
	}()
}

// noteCommit counts a committed write transaction and wakes the loop
// every ckptCommits of them.
func (s *DB) noteCommit() {
	if c := s.ckpt; c != nil && c.commits.Add(1)%ckptCommits == 0 {
		select {
		case c.kick <- struct{}{}:
		default:
		}
	}
}

// stopCheckpointer ends the loop (Close) and waits for it.
func (s *DB) stopCheckpointer() {
	if c := s.ckpt; c != nil {
		c.once.Do(func() { close(c.stop) })
		<-c.done
	}
}
