package testenv

import (
	"net"
	"net/url"
	"sync/atomic"
	"testing"
)

// TurnProxy forwards TCP connections to a server and counts round trips
// (turns): a client write that follows an answer from the server (or
// opens the connection) starts one. Tests that promise a number of round
// trips to PostgreSQL count them on the wire through it.
type TurnProxy struct {
	ln    net.Listener
	to    string
	turns atomic.Int64
}

// NewTurnProxy listens on a free local port and forwards to the address
// to ("host:port"); it stops listening when tb ends.
func NewTurnProxy(tb testing.TB, to string) *TurnProxy {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	p := &TurnProxy{ln: ln, to: to}
	go p.serve()
	tb.Cleanup(func() { ln.Close() })
	return p
}

// Addr is the proxy's "host:port".
func (p *TurnProxy) Addr() string { return p.ln.Addr().String() }

// Turns is the number of round trips so far, over every connection.
func (p *TurnProxy) Turns() int64 { return p.turns.Load() }

// ProxiedPostgresDB returns a fresh throwaway database (MustPostgresDB)
// whose URL runs every connection through a TurnProxy.
func ProxiedPostgresDB(tb testing.TB) (string, *TurnProxy) {
	tb.Helper()
	u, err := url.Parse(MustPostgresDB(tb))
	if err != nil {
		tb.Fatal(err)
	}
	p := NewTurnProxy(tb, u.Host)
	u.Host = p.Addr()
	return u.String(), p
}

func (p *TurnProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.to)
		if err != nil {
			c.Close()
			continue
		}
		var answered atomic.Bool // the server spoke since the client last did
		answered.Store(true)
		go func() { // client → server
			buf := make([]byte, 64<<10)
			for {
				n, err := c.Read(buf)
				if n > 0 {
					if answered.Swap(false) {
						p.turns.Add(1)
					}
					if _, werr := s.Write(buf[:n]); werr != nil {
						break
					}
				}
				if err != nil {
					break
				}
			}
			s.Close()
		}()
		go func() { // server → client
			buf := make([]byte, 64<<10)
			for {
				n, err := s.Read(buf)
				if n > 0 {
					answered.Store(true)
					if _, werr := c.Write(buf[:n]); werr != nil {
						break
					}
				}
				if err != nil {
					break
				}
			}
			c.Close()
		}()
	}
}
