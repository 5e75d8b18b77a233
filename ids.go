package lockstep

import (
	"crypto/rand"
	"encoding/hex"
)

// NewID returns prefix followed by 20 random hex digits: the id of a hook,
// a key or another record the services create.
func NewID(prefix string) string {
	var b [10]byte
	rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// NewOpID returns a fresh operations-log entry id (op_ + 24 hex digits),
// for a service that must know an entry's id before appending it.
func NewOpID() string {
	var b [12]byte
	rand.Read(b[:])
	return "op_" + hex.EncodeToString(b[:])
}

// SealPrefix starts a secret the store keeps encrypted at rest; a secret
// given by a client may not start with it (the store would take it for
// ciphertext).
const SealPrefix = "lsenc1:"
