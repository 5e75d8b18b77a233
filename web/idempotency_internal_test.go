package web

import (
	"context"
	"testing"
	"time"
)

// TestSameAnswer: the answer stored at commit is sent instead of the
// handler's only when they differ in nothing but a top-level duration_ms.
func TestSameAnswer(t *testing.T) {
	h := map[string]string{"Content-Type": "application/json; charset=utf-8"}
	stored := []byte(`{"commit":"abc","duration_ms":1.25,"changed":true}`)
	for _, tc := range []struct {
		name   string
		status int
		header map[string]string
		body   string
		want   bool
	}{
		{"identical", 201, h, string(stored), true},
		{"duration only", 201, h, `{"commit":"abc","duration_ms":3.5,"changed":true}`, true},
		{"another field", 201, h, `{"commit":"abd","duration_ms":1.25,"changed":true}`, false},
		{"a field more", 201, h, `{"commit":"abc","duration_ms":1.25,"changed":true,"x":1}`, false},
		{"status", 200, h, string(stored), false},
		{"header", 201, map[string]string{"Content-Type": "application/json; charset=utf-8", "Location": "/x"}, string(stored), false},
		{"not json", 201, h, `commit abc`, false},
	} {
		if got := sameAnswer(tc.status, tc.header, []byte(tc.body), 201, h, stored); got != tc.want {
			t.Errorf("%s: sameAnswer = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestFlightGroup: one holder per id at a time; a waiter gets in when
// the holder releases, gives up at its deadline; other ids are free.
func TestFlightGroup(t *testing.T) {
	g := &flightGroup{m: map[string]*flight{}}
	ctx := context.Background()
	rel, ok := g.acquire(ctx, "a", time.Now().Add(time.Second))
	if !ok {
		t.Fatal("first acquire refused")
	}
	if _, ok := g.acquire(ctx, "a", time.Now().Add(20*time.Millisecond)); ok {
		t.Fatal("second holder of a while the first holds it")
	}
	relB, ok := g.acquire(ctx, "b", time.Now().Add(time.Second))
	if !ok {
		t.Fatal("b blocked by a")
	}
	relB()
	got := make(chan bool)
	go func() {
		r, ok := g.acquire(ctx, "a", time.Now().Add(time.Minute))
		if ok {
			r()
		}
		got <- ok
	}()
	rel()
	rel() // a second release is harmless
	if !<-got {
		t.Fatal("the waiter never got in after the release")
	}
	g.mu.Lock()
	n := len(g.m)
	g.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d flights left, want none", n)
	}
}
