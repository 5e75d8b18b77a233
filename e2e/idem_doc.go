// Package e2eidem is the end-to-end suite of idempotent writes: every
// mutating route executed twice with one Idempotency-Key, concurrent
// duplicates, a server SIGKILLed between commit and answer, and a TCP
// proxy that drops connections mid-answer under the Go client and the
// CLI. It runs the built `lockstep serve` as a child process (harness:
// internal/e2ekit) and counts effects in the operations log.
package e2eidem
