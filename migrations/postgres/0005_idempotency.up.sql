-- Idempotent writes (docs/idempotency.md): one record per (API key,
-- Idempotency-Key); the operations log records the key of every entry
-- committed under one, and counts replays outside the hash chain.
CREATE TABLE idempotency_keys (
    owner_key_id  TEXT NOT NULL,
    idem_key      TEXT NOT NULL,
    fingerprint   TEXT NOT NULL,
    method        TEXT NOT NULL,
    path          TEXT NOT NULL,
    state         TEXT NOT NULL,
    token         TEXT NOT NULL,
    lease_until   BIGINT NOT NULL,
    op_id         TEXT NOT NULL DEFAULT '',
    status        INTEGER NOT NULL DEFAULT 0,
    header        TEXT NOT NULL DEFAULT '{}',
    body          BYTEA,
    replays       INTEGER NOT NULL DEFAULT 0,
    created_at    BIGINT NOT NULL,
    expires_at    BIGINT NOT NULL,
    PRIMARY KEY (owner_key_id, idem_key)
);
CREATE INDEX idempotency_keys_expires ON idempotency_keys (expires_at);

ALTER TABLE oplog ADD COLUMN idem_key TEXT NOT NULL DEFAULT '';
ALTER TABLE oplog ADD COLUMN replays INTEGER NOT NULL DEFAULT 0;
CREATE INDEX oplog_idem ON oplog (key_id, idem_key) WHERE idem_key <> '';
