//go:build lockstep_server

package main

import (
	"context"
	"sync"
	"testing"

	"github.com/lockstep-hq/lockstep/auth"
	"github.com/lockstep-hq/lockstep/internal/testenv"
	"github.com/lockstep-hq/lockstep/sqlstore"
)

// Replicas starting at once on one empty Postgres create exactly one
// admin key between them.
func TestBootstrapAdminOnceAcrossReplicas(t *testing.T) {
	url := testenv.MustPostgresDB(t)
	const n = 6
	mig, err := sqlstore.Open(context.Background(), url, sqlstore.Options{Migrate: true})
	if err != nil {
		t.Fatal(err)
	}
	mig.Close()
	paths := make([]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := 0; i < n; i++ {
		db, err := sqlstore.Open(context.Background(), url, sqlstore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			paths[i], errs[i] = bootstrapAdmin(context.Background(), db, auth.New(db, nil), t.TempDir())
		}()
	}
	close(start)
	wg.Wait()
	created := 0
	for i := range paths {
		if errs[i] != nil {
			t.Fatalf("replica %d: %v", i, errs[i])
		}
		if paths[i] != "" {
			created++
		}
	}
	db, err := sqlstore.Open(context.Background(), url, sqlstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	keys, err := db.CountKeys(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if created != 1 || keys != 1 {
		t.Fatalf("%d replicas created an admin key, %d keys in the store; want 1 and 1", created, keys)
	}
}
