// Package testenv gives tests the real services they need: a throwaway
// PostgreSQL database, a Redis client with its own key namespace, a bucket
// of their own on a real S3 server (versitygw), the git and chromium
// binaries, and free TCP ports.
//
// Lockstep tests run against real dependencies rather than fakes (see
// STYLE.md), so a missing service is a failure, never a silent skip: a skipped
// Postgres contract suite looks exactly like a passing one in CI. Each helper
// that cannot reach its service calls tb.Fatalf with instructions.
//
// The easiest way to get the services is to run the suite through
// scripts/test, which starts throwaway Postgres, Redis and versitygw
// instances when none are reachable (installing versitygw with go install
// if needed) and exports their URLs in the variables read here:
//
//	LOCKSTEP_TEST_POSTGRES_URL  admin URL (default postgres://postgres@127.0.0.1:5432/postgres)
//	LOCKSTEP_TEST_REDIS_URL     Redis URL (default redis://127.0.0.1:6379/0)
//	LOCKSTEP_TEST_S3_URL        S3 server with its keys, http://ACCESS:SECRET@host:port (no default)
//	LOCKSTEP_TEST_VERSITYGW     the versitygw binary, for tests that run (and kill) their own
//	LOCKSTEP_TEST_HELPERS       a file listing the helpers scripts/test started ("name pid url log")
//
// Under scripts/test a helper that cannot reach its service says what is
// true: the throwaway server scripts/test started for that URL died (and
// where its log is kept), or it runs but refused, or scripts/test did not
// start it.
//
// Every resource a helper creates is released in tb.Cleanup, so tests may run
// in parallel and against a shared server without seeing each other's data.
package testenv
