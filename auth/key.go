// Package auth issues and checks API keys. A key is
// "lsk_<8 hex>_<43 chars of base64url>": the first part is a visible prefix
// used to find the stored row; only the SHA-256 of the whole key is stored,
// and it is compared in constant time. SHA-256 (not a slow KDF) is right
// here because the secret has 256 bits of entropy: there is nothing to
// brute-force. The service creates an admin key on first start and writes
// it to <data>/admin.key with mode 0600; the secret is shown once and never
// logged.
package auth

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/lockstep-hq/lockstep"
)

// Service manages API keys.
type Service struct {
	store lockstep.Store
	now   func() time.Time

	mu      sync.Mutex
	touched map[string]time.Time // key id → last time last_used_at was written
}

// New returns a key service. now may be nil (time.Now).
func New(store lockstep.Store, now func() time.Time) *Service {
	if now == nil {
		now = time.Now
	}
	return &Service{store: store, now: now, touched: map[string]time.Time{}}
}

// System is the actor of operations the service does by itself.
var System = &lockstep.Key{ID: "system", Name: "system", Role: lockstep.RoleAdmin}

// Generate returns a new secret and its parts.
func Generate() (secret, prefix string, hash []byte) {
	var p [4]byte
	var s [32]byte
	rand.Read(p[:])
	rand.Read(s[:])
	prefix = "lsk_" + hex.EncodeToString(p[:])
	secret = prefix + "_" + base64.RawURLEncoding.EncodeToString(s[:])
	sum := sha256.Sum256([]byte(secret))
	return secret, prefix, sum[:]
}

// Create issues a key; the returned secret is shown once.
func (s *Service) Create(ctx context.Context, actor *lockstep.Key, name, role string) (*lockstep.Key, string, error) {
	return s.Mint(ctx, actor, MintRequest{Name: name, Role: role})
}

// MaxAgentTTL is the longest life of a key an agent mints.
const MaxAgentTTL = 24 * time.Hour

// MintRequest is a key to issue. TTL (0: never expires) and Scope make a
// minted key: it records the key that minted it as its parent, and the
// parent's revocation revokes it.
type MintRequest struct {
	Name  string
	Role  string
	TTL   time.Duration
	Scope *lockstep.KeyScope
}

// Mint issues a key; the returned secret is shown once. An admin may
// issue any key; an agent only a scoped agent key with a TTL of at most
// MaxAgentTTL, on a workspace it owns or a task whose workspaces it owns,
// within its own scope and life.
func (s *Service) Mint(ctx context.Context, actor *lockstep.Key, req MintRequest) (*lockstep.Key, string, error) {
	name, role := req.Name, req.Role
	if actor.Role != lockstep.RoleAdmin && actor.Role != lockstep.RoleAgent {
		return nil, "", lockstep.Errorf(lockstep.EFORBIDDEN, "only an admin or an agent key may create keys")
	}
	if !lockstep.ValidRole(role) {
		return nil, "", lockstep.Errorf(lockstep.EINVALID, "invalid role %q: want admin, agent, reviewer, ci or runner", role)
	}
	if err := lockstep.ValidateName("key name", name); err != nil {
		return nil, "", err
	}
	if req.TTL < 0 {
		return nil, "", lockstep.Errorf(lockstep.EINVALID, "ttl %s: want a positive duration", req.TTL)
	}
	now := lockstep.TruncateTime(s.now())
	if err := s.checkScope(ctx, actor, req); err != nil {
		return nil, "", err
	}
	secret, prefix, hash := Generate()
	k := &lockstep.Key{ID: "key_" + prefix[4:], Name: name, Role: role, Prefix: prefix, Hash: hash, CreatedAt: now, Scope: req.Scope}
	details := map[string]any{"key_id": k.ID, "name": name, "role": role}
	if (req.TTL > 0 || req.Scope != nil) && actor.ID != System.ID {
		k.ParentKeyID = actor.ID // the entry's own key_id: the minting key
	}
	if req.TTL > 0 {
		exp := now.Add(req.TTL)
		if actor.ExpiresAt != nil && exp.After(*actor.ExpiresAt) {
			exp = *actor.ExpiresAt // never outlives its parent
		}
		k.ExpiresAt = &exp
		details["expires_at"] = exp.UTC().Format(time.RFC3339)
	}
	if req.Scope != nil {
		details["scope"] = req.Scope.String()
	}
	entry := &lockstep.OpEntry{KeyID: actor.ID, KeyName: actor.Name, Op: "key.create", Details: details}
	if err := s.store.CreateKey(ctx, k, entry); err != nil {
		return nil, "", err
	}
	return k, secret, nil
}

// checkScope applies the minting rules of a scoped or expiring key.
func (s *Service) checkScope(ctx context.Context, actor *lockstep.Key, req MintRequest) error {
	sc := req.Scope
	if sc != nil {
		if (sc.Workspace == "") == (sc.Base == "") || (sc.Workspace != "" && sc.Task != "") || (sc.Base != "" && sc.Task == "") {
			return lockstep.Errorf(lockstep.EINVALID, "scope: want either {workspace} or {base, task}")
		}
		if req.Role == lockstep.RoleAdmin {
			return lockstep.Errorf(lockstep.EINVALID, "a scoped key may not be an admin key: scope limits agent, reviewer and ci keys")
		}
		if sc.Workspace != "" {
			ws, err := s.store.RepoByName(ctx, sc.Workspace)
			if err != nil {
				return err
			}
			if !ws.IsWorkspace() {
				return lockstep.Errorf(lockstep.EINVALID, "scope: %s is a base repository, not a workspace", ws.Name)
			}
			if err := actor.InScope(ws); err != nil {
				return err
			}
			if actor.Role != lockstep.RoleAdmin && !actor.Owns(ws) {
				return lockstep.Errorf(lockstep.EFORBIDDEN, "an agent key may scope a key only to a workspace it owns: %s belongs to another key", ws.Name)
			}
			sc.Owner = ws.OwnerKeyID
		} else {
			base, err := s.store.RepoByName(ctx, sc.Base)
			if err != nil {
				return err
			}
			if base.IsWorkspace() {
				return lockstep.Errorf(lockstep.EINVALID, "scope: %s is a workspace; a task scope names a base repository", base.Name)
			}
			if actor.Scope != nil && (actor.Scope.Base != sc.Base || actor.Scope.Task != sc.Task) {
				return lockstep.Errorf(lockstep.EFORBIDDEN, "key %s is scoped to %s: it may not mint a key for task %s of %s", actor.Name, actor.Scope, sc.Task, sc.Base)
			}
			switch {
			case actor.Scope != nil:
				sc.Owner = actor.Scope.Owner
			case actor.Role != lockstep.RoleAdmin:
				sc.Owner = actor.ID
			default:
				sc.Owner = ""
			}
			if actor.Role != lockstep.RoleAdmin {
				wss, err := s.store.ListRepos(ctx, lockstep.RepoFilter{Network: sc.Base, Task: sc.Task})
				if err != nil {
					return err
				}
				owns := false
				for _, w := range wss {
					if !w.IsWorkspace() {
						continue
					}
					if w.OwnerKeyID != actor.ID && !actor.Owns(w) {
						return lockstep.Errorf(lockstep.EFORBIDDEN, "an agent key may scope a key only to a task whose workspaces it owns: %s belongs to another key", w.Name)
					}
					owns = true
				}
				if !owns && actor.Scope == nil {
					return lockstep.Errorf(lockstep.EFORBIDDEN, "an agent key may scope a key only to a task whose workspaces it owns: it owns none of task %s of %s", sc.Task, sc.Base)
				}
			}
		}
	}
	if actor.Role == lockstep.RoleAdmin {
		return nil
	}
	switch {
	case req.Role != lockstep.RoleAgent:
		return lockstep.Errorf(lockstep.EFORBIDDEN, "an agent key may mint only agent keys")
	case sc == nil:
		return lockstep.Errorf(lockstep.EFORBIDDEN, "an agent key may mint only scoped keys: give a workspace or a base and task")
	case req.TTL <= 0 || req.TTL > MaxAgentTTL:
		return lockstep.Errorf(lockstep.EINVALID, "ttl %s: an agent key mints keys living at most %s", req.TTL, MaxAgentTTL)
	}
	return nil
}

// List returns every key (never secrets).
func (s *Service) List(ctx context.Context, actor *lockstep.Key) ([]*lockstep.Key, error) {
	if actor.Role != lockstep.RoleAdmin {
		return nil, lockstep.Errorf(lockstep.EFORBIDDEN, "only an admin key may list keys")
	}
	return s.store.ListKeys(ctx)
}

// Revoke revokes a key and every key it minted; they stop working at
// once. An admin revokes any key; a key revokes the keys it minted.
func (s *Service) Revoke(ctx context.Context, actor *lockstep.Key, id string) error {
	if actor.Role != lockstep.RoleAdmin {
		if err := s.ownChild(ctx, actor, id); err != nil {
			return err
		}
	}
	entry := &lockstep.OpEntry{KeyID: actor.ID, KeyName: actor.Name, Op: "key.revoke", Details: map[string]any{"key_id": id}}
	return s.store.RevokeKey(ctx, id, s.now(), entry)
}

// MayRevoke returns permission_denied unless actor may revoke key id
// (the rule of Revoke, decided before a request body is read).
func (s *Service) MayRevoke(ctx context.Context, actor *lockstep.Key, id string) error {
	if actor.Role == lockstep.RoleAdmin {
		return nil
	}
	return s.ownChild(ctx, actor, id)
}

// ownChild returns permission_denied unless actor minted key id.
func (s *Service) ownChild(ctx context.Context, actor *lockstep.Key, id string) error {
	keys, err := s.store.ListKeys(ctx)
	if err != nil {
		return err
	}
	for _, k := range keys {
		if k.ID == id && k.ParentKeyID == actor.ID {
			return nil
		}
	}
	return lockstep.Errorf(lockstep.EFORBIDDEN, "only an admin key, or the key that minted it, may revoke key %s", id)
}

// SetQuota sets a key's quota overrides (admin): each nil clears that
// override (the server's setting applies), 0 is unlimited, a negative
// value is invalid and nothing changes.
func (s *Service) SetQuota(ctx context.Context, actor *lockstep.Key, id string, q lockstep.KeyQuota) error {
	if actor.Role != lockstep.RoleAdmin {
		return lockstep.Errorf(lockstep.EFORBIDDEN, "only an admin key may set quotas")
	}
	if q.Workspaces != nil && *q.Workspaces < 0 {
		return lockstep.Errorf(lockstep.EINVALID, "quota workspaces %d: want 0 (unlimited) or more", *q.Workspaces)
	}
	if q.StorageBytes != nil && *q.StorageBytes < 0 {
		return lockstep.Errorf(lockstep.EINVALID, "quota storage_bytes %d: want 0 (unlimited) or more", *q.StorageBytes)
	}
	if q.Runs != nil && *q.Runs < 0 {
		return lockstep.Errorf(lockstep.EINVALID, "quota runs %d: want 0 (unlimited) or more", *q.Runs)
	}
	d := map[string]any{"key_id": id, "workspaces": nil, "storage_bytes": nil, "runs": nil}
	if q.Workspaces != nil {
		d["workspaces"] = *q.Workspaces
	}
	if q.StorageBytes != nil {
		d["storage_bytes"] = *q.StorageBytes
	}
	if q.Runs != nil {
		d["runs"] = *q.Runs
	}
	entry := &lockstep.OpEntry{KeyID: actor.ID, KeyName: actor.Name, Op: "key.quota", Details: d}
	return s.store.SetKeyQuota(ctx, id, q, entry)
}

// Authenticate returns the key a secret belongs to. Unknown, malformed and
// revoked keys are all unauthenticated.
func (s *Service) Authenticate(ctx context.Context, secret string) (*lockstep.Key, error) {
	unauth := lockstep.Errorf(lockstep.EUNAUTH, "unknown or revoked API key")
	parts := strings.SplitN(secret, "_", 3)
	if len(parts) != 3 || parts[0] != "lsk" || len(parts[1]) != 8 {
		return nil, unauth
	}
	k, err := s.store.KeyByPrefix(ctx, "lsk_"+parts[1])
	if lockstep.ErrorCode(err) == lockstep.ENOTFOUND {
		return nil, unauth
	}
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256([]byte(secret))
	if subtle.ConstantTimeCompare(sum[:], k.Hash) != 1 || k.RevokedAt != nil {
		return nil, unauth
	}
	if k.Expired(s.now()) {
		return nil, lockstep.Errorf(lockstep.EUNAUTH, "API key %s expired at %s", k.Prefix, k.ExpiresAt.UTC().Format(time.RFC3339))
	}
	s.touch(ctx, k)
	return k, nil
}

// Recheck returns unauthenticated when k, authenticated earlier, has
// since been revoked (itself or a key that minted it) or has expired: a
// long-lived request (an event stream) checks its key again while it
// runs, so that a revocation also ends what the key had already opened.
func (s *Service) Recheck(ctx context.Context, k *lockstep.Key) error {
	if k.Expired(s.now()) {
		return lockstep.Errorf(lockstep.EUNAUTH, "API key %s expired at %s", k.Prefix, k.ExpiresAt.UTC().Format(time.RFC3339))
	}
	cur, err := s.store.KeyByPrefix(ctx, k.Prefix)
	if lockstep.ErrorCode(err) == lockstep.ENOTFOUND || (err == nil && (cur.ID != k.ID || cur.RevokedAt != nil)) {
		return lockstep.Errorf(lockstep.EUNAUTH, "unknown or revoked API key")
	}
	return err
}

// Live returns the key with id if it is neither revoked (itself or a key
// above it: a revocation cascades in one transaction) nor expired;
// unauthenticated otherwise, not_found for an unknown id.
func (s *Service) Live(ctx context.Context, id string) (*lockstep.Key, error) {
	if !strings.HasPrefix(id, "key_") {
		return nil, lockstep.Errorf(lockstep.ENOTFOUND, "key %s not found", id)
	}
	k, err := s.store.KeyByPrefix(ctx, "lsk_"+strings.TrimPrefix(id, "key_"))
	if err != nil {
		return nil, err
	}
	if k.ID != id {
		return nil, lockstep.Errorf(lockstep.ENOTFOUND, "key %s not found", id)
	}
	if k.RevokedAt != nil {
		return nil, lockstep.Errorf(lockstep.EUNAUTH, "key %s was revoked", k.Name)
	}
	if k.Expired(s.now()) {
		return nil, lockstep.Errorf(lockstep.EUNAUTH, "key %s expired at %s", k.Name, k.ExpiresAt.UTC().Format(time.RFC3339))
	}
	return k, nil
}

// touch writes last_used_at at most once a minute per key, so that reads
// do not each cost a write.
func (s *Service) touch(ctx context.Context, k *lockstep.Key) {
	now := s.now()
	s.mu.Lock()
	last, ok := s.touched[k.ID]
	if ok && now.Sub(last) < time.Minute {
		s.mu.Unlock()
		return
	}
	s.touched[k.ID] = now
	s.mu.Unlock()
	_ = s.store.TouchKey(ctx, k.ID, now)
}

// Bootstrap creates an admin key when the store has none and writes it to
// <dataDir>/admin.key (0600). It returns the file's path, or "" when keys
// already existed.
func (s *Service) Bootstrap(ctx context.Context, dataDir string) (string, error) {
	n, err := s.store.CountKeys(ctx)
	if err != nil {
		return "", fmt.Errorf("count keys: %w", err)
	}
	if n > 0 {
		return "", nil
	}
	k, secret, err := s.Create(ctx, System, "admin", lockstep.RoleAdmin)
	if err != nil {
		return "", fmt.Errorf("create admin key: %w", err)
	}
	path := filepath.Join(dataDir, "admin.key")
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(secret+"\n"), 0o600); err != nil {
		_ = s.store.RevokeKey(ctx, k.ID, s.now(), nil)
		return "", fmt.Errorf("write admin key: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return "", fmt.Errorf("write admin key: %w", err)
	}
	return path, nil
}

type ctxKey struct{}

// WithKey returns ctx carrying the caller's key (request-scoped).
func WithKey(ctx context.Context, k *lockstep.Key) context.Context {
	return context.WithValue(ctx, ctxKey{}, k)
}

// FromContext returns the caller's key, or nil.
func FromContext(ctx context.Context) *lockstep.Key {
	k, _ := ctx.Value(ctxKey{}).(*lockstep.Key)
	return k
}

// Require returns permission_denied unless k has one of roles.
func Require(k *lockstep.Key, roles ...string) error {
	for _, r := range roles {
		if k.Role == r {
			return nil
		}
	}
	return lockstep.Errorf(lockstep.EFORBIDDEN, "role %s may not do this (needs %s)", k.Role, strings.Join(roles, " or "))
}
