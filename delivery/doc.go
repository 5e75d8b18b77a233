// Package delivery sends what Lockstep posts to other services: gate-hook
// deliveries (Hooks, signed as Standard Webhooks, retried with Backoff
// from an outbox drained by DrainOutbox) and the transport the effects
// outbox shares with them (Sender: its dials refuse internal addresses
// unless allow-listed; CheckTargetURL and CheckHookURL refuse such targets
// when they are registered). lockstep.RedactURL is how every target URL is shown:
// query values redacted, credentials and fragment dropped.
package delivery
