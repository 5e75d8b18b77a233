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

// TestNumericFlagsRefuseNegatives: a negative count, size or duration,
// by flag or environment, is refused naming the flag (exit 2), before
// any request; it was taken silently (a negative --max-tracked, say) or,
// on the server, replaced by the default (--run-job-max-output-bytes).
// A value of the wrong kind in the environment names the variable and
// what it takes, also with exit 2 (it exited 1 with Go's parser error).
func TestNumericFlagsRefuseNegatives(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"watch", "--dir", dir, "--max-tracked", "-5"}, nil, "--max-tracked (LOCKSTEP_WATCH_MAX_TRACKED) must not be negative, got -5"},
		{[]string{"repo", "list"}, map[string]string{"LOCKSTEP_RETRIES": "-2"}, "--retries (LOCKSTEP_RETRIES) must not be negative, got -2"},
		{[]string{"repo", "list", "--attempt-timeout=-1s"}, nil, "--attempt-timeout (LOCKSTEP_ATTEMPT_TIMEOUT) must not be negative, got -1s"},
		{[]string{"repo", "list"}, map[string]string{"LOCKSTEP_RETRIES": "abc"}, `LOCKSTEP_RETRIES must be an integer, got "abc"`},
		{[]string{"repo", "list"}, map[string]string{"LOCKSTEP_RETRY_DELAY": "5"}, `LOCKSTEP_RETRY_DELAY must be a duration such as 500ms, 30s, 5m or 1h, got "5"`},
		{[]string{"serve", "--run-job-max-output-bytes", "-1"}, nil, "--run-job-max-output-bytes (LOCKSTEP_RUN_JOB_MAX_OUTPUT_BYTES) must not be negative, got -1"},
		{[]string{"serve"}, map[string]string{"LOCKSTEP_RUN_JOB_TIMEOUT": "-5m"}, "--run-job-timeout (LOCKSTEP_RUN_JOB_TIMEOUT) must not be negative, got -5m0s"},
	} {
		if !serverBuild && c.args[0] == "serve" {
			continue // the server build's flags: tested with -tags lockstep_server
		}
		env := map[string]string{"LOCKSTEP_URL": "http://127.0.0.1:1", "LOCKSTEP_KEY": "lsk_x_y", "LOCKSTEP_DATA": dir}
		for k, v := range c.env {
			env[k] = v
		}
		var out, errb bytes.Buffer
		err := run(context.Background(), c.args, func(k string) string { return env[k] }, strings.NewReader(""), &out, &errb)
		msg := errb.String()
		if err != nil {
			msg += err.Error()
		}
		if code := exitCode(err); code != 2 || !strings.Contains(msg, c.want) {
			t.Errorf("lockstep %s %v: exit %d, %q; want exit 2 and %q", strings.Join(c.args, " "), c.env, code, msg, c.want)
		}
	}
}
