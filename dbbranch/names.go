package dbbranch

import (
	"crypto/hmac"
	"crypto/pbkdf2"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/internal/lazyre"
)

// Object kinds: the letter after the prefix in every database or role name.
// The kind in the name is authoritative; the JSON comment only carries
// metadata (which repository, which snapshot, when).
const (
	kindTemplate    = 't' // repository: Lockstep's own copy of the user's template (IS_TEMPLATE, no connections)
	kindStaging     = 'u' // repository: a template copy being built (BindTemplate / RefreshTemplate)
	kindTplSpare    = 's' // repository: warm spare copy of the template copy, renamed into a branch on CreateBranch
	kindOwnerRole   = 'o' // repository: NOLOGIN role owning the objects inside every copy of the template
	kindBranch      = 'b' // workspace: the branch database (the agent's DSN)
	kindSnapshot    = 'n' // workspace: a snapshot; the name ends with the snapshot id
	kindRestSpare   = 'x' // workspace: warm spare copy of the latest snapshot, renamed into the branch on Restore
	kindTrash       = 'd' // workspace: the previous branch while a Restore swaps databases
	kindRole        = 'r' // workspace: the LOGIN role of the branch
	hashLen         = 12  // hex characters of the name hash (48 bits)
	maxIdentBytes   = 63
	maxPrefixLength = 6
)

var (
	nameRE   = lazyre.New(`^[a-z0-9][a-z0-9._-]{0,99}$`)
	snapIDRE = lazyre.New(`^[a-z0-9-]{1,40}$`)
	prefixRE = lazyre.New(`^[a-z][a-z0-9]{0,5}$`)
)

func validateName(what, name string) error {
	if !nameRE.MatchString(name) {
		return lockstep.Errorf(lockstep.EINVALID, "invalid %s name %q: want [a-z0-9][a-z0-9._-]{0,99}", what, name)
	}
	return nil
}

func validateSnapshotID(id string) error {
	if !snapIDRE.MatchString(id) {
		return lockstep.Errorf(lockstep.EINVALID, "invalid snapshot id %q: want [a-z0-9-]{1,40}", id)
	}
	return nil
}

// namer derives every database and role name from a prefix. Names look like
//
//	<prefix>_<kind>_<hash12>_<short>
//
// where hash12 is the first 48 bits of SHA-256(prefix, domain, full name) in
// hex and short is the name with '.' and '-' turned into '_', cut so the
// whole fits in 63 bytes. Snapshot names end with the snapshot id instead
// (kept verbatim, so ids can be read back from the catalog).
type namer struct{ prefix string }

func (n namer) hash(domain, name string) string {
	h := sha256.Sum256([]byte(n.prefix + "\x00" + domain + "\x00" + name))
	return hex.EncodeToString(h[:hashLen/2])
}

func (n namer) repoHash(repo string) string { return n.hash("repo", repo) }
func (n namer) wsHash(ws string) string     { return n.hash("ws", ws) }

func (n namer) name(kind byte, hash, human string) string {
	base := n.prefix + "_" + string(kind) + "_" + hash
	room := maxIdentBytes - len(base) - 1
	s := strings.NewReplacer(".", "_", "-", "_").Replace(human)
	if len(s) > room {
		s = s[:room]
	}
	if s == "" {
		return base
	}
	return base + "_" + s
}

func (n namer) snapshot(wsHash, id string) string {
	return n.prefix + "_" + string(kindSnapshot) + "_" + wsHash + "_" + id
}

// parse splits a name made by this namer; ok is false for anything else.
func (n namer) parse(name string) (kind byte, hash, rest string, ok bool) {
	p := n.prefix + "_"
	if !strings.HasPrefix(name, p) || len(name) < len(p)+2+hashLen {
		return 0, "", "", false
	}
	s := name[len(p):]
	if s[1] != '_' {
		return 0, "", "", false
	}
	kind, hash, rest = s[0], s[2:2+hashLen], s[2+hashLen:]
	if rest != "" {
		if rest[0] != '_' {
			return 0, "", "", false
		}
		rest = rest[1:]
	}
	return kind, hash, rest, true
}

// lockKey turns a name hash into a pg_advisory_lock key. tag separates
// repository locks, workspace locks and spare-builder locks; the high
// bits hold a constant so the keys are unlikely to meet other users of
// advisory locks on the same server.
func lockKey(tag byte, hash string) int64 {
	b, _ := hex.DecodeString(hash)
	var buf [8]byte
	copy(buf[2:], b)
	buf[0] = 0x4c // 'L'
	buf[1] = tag
	return int64(binary.BigEndian.Uint64(buf[:]))
}

func ident(name string) string { return pgx.Identifier{name}.Sanitize() }

func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// password derives a workspace role's password: HMAC-SHA256(secret,
// workspace) in hex, cut to 32 characters. Nothing is stored; the same
// secret gives the same password after a restart.
func password(secret []byte, ws string) string {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("lockstep dbbranch role\x00" + ws))
	return hex.EncodeToString(m.Sum(nil))[:32]
}

// scramIterations is low on purpose: the iteration count slows down
// guessing low-entropy passwords, and these are 128 random bits. Letting
// the server hash a plaintext password (4096 iterations) cost 10-20 ms of
// the warm CreateBranch here.
const scramIterations = 256

// scramVerifier returns the SCRAM-SHA-256 verifier Postgres stores for
// password (RFC 5802/7677), computed here with a salt derived from the
// secret, so ALTER ROLE … PASSWORD receives a hash, never the password.
func scramVerifier(secret []byte, ws, password string) string {
	sm := hmac.New(sha256.New, secret)
	sm.Write([]byte("lockstep dbbranch salt\x00" + ws))
	salt := sm.Sum(nil)[:16]
	salted, _ := pbkdf2.Key(sha256.New, password, salt, scramIterations, sha256.Size)
	mac := func(key []byte, msg string) []byte {
		h := hmac.New(sha256.New, key)
		h.Write([]byte(msg))
		return h.Sum(nil)
	}
	clientKey := mac(salted, "Client Key")
	stored := sha256.Sum256(clientKey)
	serverKey := mac(salted, "Server Key")
	b64 := base64.StdEncoding.EncodeToString
	return fmt.Sprintf("SCRAM-SHA-256$%d:%s$%s:%s", scramIterations, b64(salt), b64(stored[:]), b64(serverKey))
}
