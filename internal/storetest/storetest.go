// Package storetest is the contract suite of the metadata store: one test
// per method of lockstep.Store and of every interface it is made of
// (KeyStore, OpStore, RepoStore, GateStore, CheckpointStore,
// IdempotencyStore), and of lockstep.PackStore for the stores that
// implement it (object-storage mode: pack list, generation, leases),
// written against those interfaces only, so that every
// implementation is held to the same promises: the error codes named in
// the method comments, the transactions (UpdateRefs all-or-nothing,
// UpdateRefsAndStatus moving both or neither, the hook outbox written with
// the ref move, one linear operations-log chain under concurrent appends),
// filters, paging and ordering.
//
// An implementation runs it from its own tests:
//
//	func TestContract(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) lockstep.Store { return openFresh(t) })
//	}
//
// open must return a new, empty, migrated store each time it is called and
// release it when t ends. TestSuiteCoversEveryMethod (in this package) fails
// when an interface method has no test here, so the suite grows with the
// interfaces.
package storetest

import (
	"context"
	"fmt"
	"reflect"
	"sort"
	"testing"
	"time"

	"github.com/lockstep-hq/lockstep"
)

// Open returns a new, empty store; it is released when t ends.
type Open func(t *testing.T) lockstep.Store

// test is the contract of one method.
type test func(t *testing.T, s lockstep.Store)

// Interfaces are the store interfaces the suite covers, method by method.
func Interfaces() []reflect.Type {
	return []reflect.Type{
		reflect.TypeOf((*lockstep.Store)(nil)).Elem(),
		reflect.TypeOf((*lockstep.KeyStore)(nil)).Elem(),
		reflect.TypeOf((*lockstep.OpStore)(nil)).Elem(),
		reflect.TypeOf((*lockstep.RepoStore)(nil)).Elem(),
		reflect.TypeOf((*lockstep.GateStore)(nil)).Elem(),
		reflect.TypeOf((*lockstep.CheckpointStore)(nil)).Elem(),
		reflect.TypeOf((*lockstep.IdempotencyStore)(nil)).Elem(),
		reflect.TypeOf((*lockstep.EffectStore)(nil)).Elem(),
		// Not part of Store (only object-storage mode needs it): its tests
		// skip on a store that does not implement it.
		reflect.TypeOf((*lockstep.PackStore)(nil)).Elem(),
		// Optional beside PackStore (small packs kept in the database).
		reflect.TypeOf((*lockstep.InlinePackStore)(nil)).Elem(),
	}
}

// tests maps every method name to its contract test.
func tests() map[string]test {
	all := map[string]test{}
	for _, part := range []map[string]test{keyTests(), opTests(), repoTests(), gateTests(), checkpointTests(), idemTests(), packTests(), effectTests(), storeTests()} {
		for name, fn := range part {
			if _, dup := all[name]; dup {
				panic("storetest: two tests for " + name)
			}
			all[name] = fn
		}
	}
	return all
}

// Methods returns the names of the methods the suite tests, sorted.
func Methods() []string {
	var names []string
	for name := range tests() {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

// Run runs the contract of every method, each on a store of its own.
func Run(t *testing.T, open Open) {
	all := tests()
	for _, name := range Methods() {
		fn := all[name]
		t.Run(name, func(t *testing.T) { fn(t, open(t)) })
	}
}

func storeTests() map[string]test {
	return map[string]test{
		"Ping": func(t *testing.T, s lockstep.Store) {
			if err := s.Ping(context.Background()); err != nil {
				t.Fatalf("Ping of a fresh store: %v", err)
			}
		},
		"Close": func(t *testing.T, s lockstep.Store) {
			ctx := context.Background()
			if err := s.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			// A closed store is an outage for its callers, not a bug: 503.
			err := s.Ping(ctx)
			wantCode(t, err, lockstep.EUNAVAILABLE)
			_, err = s.RepoByName(ctx, "any")
			wantCode(t, err, lockstep.EUNAVAILABLE)
		},
	}
}

// Helpers.

var bg = context.Background()

func oid(n int) string { return fmt.Sprintf("%040x", n) }

func ent(op string) *lockstep.OpEntry {
	return &lockstep.OpEntry{KeyID: "key_suite", KeyName: "suite", Op: op}
}

func wantCode(t *testing.T, err error, code string) {
	t.Helper()
	if got := lockstep.ErrorCode(err); got != code {
		t.Fatalf("error %v: code %q, want %q", err, got, code)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// mustRepo creates a repository (a workspace when forkOf is set).
func mustRepo(t *testing.T, s lockstep.Store, name, forkOf string, refs ...lockstep.Ref) *lockstep.Repo {
	t.Helper()
	network := name
	if forkOf != "" {
		base, err := s.RepoByName(bg, forkOf)
		must(t, err)
		network = base.Network
	}
	r := &lockstep.Repo{Name: name, Network: network, ForkOf: forkOf, DefaultBranch: "main"}
	must(t, s.CreateRepo(bg, r, refs, ent("repo.create")))
	return r
}

// opsOf lists the entries of one op, oldest first.
func opsOf(t *testing.T, s lockstep.Store, op string) []*lockstep.OpEntry {
	t.Helper()
	out, err := s.ListOps(bg, lockstep.OpFilter{Op: op, Limit: 1000})
	must(t, err)
	return out
}

// wantOps fails unless exactly n entries of op were appended.
func wantOps(t *testing.T, s lockstep.Store, op string, n int) {
	t.Helper()
	if got := opsOf(t, s, op); len(got) != n {
		t.Fatalf("%d %q entries, want %d", len(got), op, n)
	}
}

// wantChain fails unless the whole log verifies with n entries.
func wantChain(t *testing.T, s lockstep.Store, n int64) {
	t.Helper()
	res, err := s.VerifyOps(bg)
	must(t, err)
	if !res.OK || res.Entries != n {
		t.Fatalf("VerifyOps = %+v, want ok with %d entries", res, n)
	}
}

func at(sec int) time.Time { return time.Unix(1_700_000_000+int64(sec), 0).UTC() }
