package txrun

import (
	"os"
	"sync"
	"time"
	"unicode/utf8"
)

// tailWriter is a pipe the command writes one stream to: a goroutine
// copies it to the caller's file as it comes and keeps the last n bytes.
type tailWriter struct {
	w    *os.File // the command's end
	r    *os.File
	mu   sync.Mutex
	buf  []byte
	n    int
	done chan struct{}
}

func newTailWriter(out *os.File, n int) (*tailWriter, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	t := &tailWriter{w: w, r: r, n: n, done: make(chan struct{})}
	go func() {
		defer close(t.done)
		b := make([]byte, 32<<10)
		for {
			k, err := r.Read(b)
			if k > 0 {
				if out != nil {
					out.Write(b[:k])
				}
				t.mu.Lock()
				t.buf = append(t.buf, b[:k]...)
				if len(t.buf) > 2*t.n {
					t.buf = append(t.buf[:0], t.buf[len(t.buf)-t.n:]...)
				}
				t.mu.Unlock()
			}
			if err != nil {
				return
			}
		}
	}()
	return t, nil
}

// started closes the parent's copy of the write end once the command has
// its own (or failed to start), so the reader sees EOF when it exits.
func (t *tailWriter) started() { t.w.Close() }

// close releases the pipe without a command.
func (t *tailWriter) close() { t.w.Close(); t.r.Close() }

// finish waits (briefly: a surviving grandchild may hold the pipe) for the
// copy to end and returns the tail, starting on a rune boundary.
func (t *tailWriter) finish() string {
	select {
	case <-t.done:
	case <-time.After(2 * time.Second):
		t.r.Close() // unblock the reader; what it had is kept
		<-t.done
	}
	t.r.Close()
	t.mu.Lock()
	defer t.mu.Unlock()
	b := t.buf
	if len(b) > t.n {
		b = b[len(b)-t.n:]
		for i := 0; i < len(b) && i < utf8.UTFMax; i++ {
			if utf8.RuneStart(b[i]) {
				b = b[i:]
				break
			}
		}
	}
	return string(b)
}
