package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// TestHelpNeverShowsSecrets: `-h` prints flag defaults taken from the
// environment; a key, the branch secret and passwords in URLs must not
// be among them (issue 9: they ended up on screen and in recordings).
func TestHelpNeverShowsSecrets(t *testing.T) {
	env := map[string]string{
		"LOCKSTEP_KEY":                 "lsk_deadbeef_SECRETSECRETSECRET",
		"LOCKSTEP_BRANCH_SECRET":       "branch-SECRET-value",
		"LOCKSTEP_DATABASE_URL":        "postgres://lockstep:dbPASSWORD@db:5432/lockstep",
		"LOCKSTEP_BRANCH_DATABASE_URL": "postgres://admin:branchPASSWORD@db:5432/postgres",
		"LOCKSTEP_REDIS_URL":           "redis://:redisPASSWORD@redis:6379/0",

		"LOCKSTEP_EFFECT_SIGNING_SECRET": "whsec_EFFECTSECRETvalue",
	}
	getenv := func(k string) string { return env[k] }
	for _, args := range [][]string{{"oplog", "-h"}, {"push", "-h"}, {"serve", "-h"}, {"load", "-h"}, {"help", "client"}} {
		if !serverBuild && (args[0] == "serve" || args[0] == "load") {
			continue // they run the server build: tested with -tags lockstep_server
		}
		var out, errb bytes.Buffer
		if err := run(context.Background(), args, getenv, strings.NewReader(""), &out, &errb); err != nil && err != exitError(0) {
			t.Fatalf("%v: %v", args, err)
		}
		help := out.String() + errb.String()
		for _, secret := range []string{"SECRETSECRET", "branch-SECRET", "dbPASSWORD", "branchPASSWORD", "redisPASSWORD", "EFFECTSECRET"} {
			if strings.Contains(help, secret) {
				t.Errorf("lockstep %s shows %q:\n%s", strings.Join(args, " "), secret, help)
			}
		}
		if len(help) < 100 {
			t.Fatalf("%v printed no help: %q", args, help)
		}
		// Client commands name their shared flags in one line; `help
		// client` shows them in full.
		if (args[0] == "load" || args[0] == "help") && !strings.Contains(help, `(default $LOCKSTEP_KEY)`) {
			t.Errorf("lockstep %s: the key's default should read $LOCKSTEP_KEY:\n%s", args[0], help)
		}
	}
}
