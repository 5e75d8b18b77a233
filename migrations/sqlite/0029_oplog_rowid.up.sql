-- The operations log keyed by its rowid (issue #26, the keyed preflight's
-- and the Idempotency-Key's store cost): `seq BIGINT PRIMARY KEY` is not
-- SQLite's rowid, so every append wrote the table (keyed by a hidden
-- rowid) and a separate unique index on seq. `seq INTEGER PRIMARY KEY` is
-- the rowid: one b-tree fewer per append, lookups by seq read the table
-- itself. Every column is copied as stored, so every entry's hash and
-- every link of the chain stay as they were; oplog_head is untouched.
CREATE TABLE oplog_0029 (
    seq          INTEGER PRIMARY KEY,
    id           TEXT NOT NULL UNIQUE,
    time         BIGINT NOT NULL,
    key_id       TEXT NOT NULL,
    key_name     TEXT NOT NULL,
    op           TEXT NOT NULL,
    result       TEXT NOT NULL,
    read_only    BOOLEAN NOT NULL,
    repo         TEXT NOT NULL,
    refs         TEXT NOT NULL,
    objects      BIGINT NOT NULL,
    bytes        BIGINT NOT NULL,
    duration_us  BIGINT NOT NULL,
    trace_id     TEXT NOT NULL,
    follows      TEXT NOT NULL,
    details      TEXT NOT NULL,
    prev_hash    TEXT NOT NULL,
    hash         TEXT NOT NULL,
    idem_key     TEXT NOT NULL DEFAULT '',
    replays      INTEGER NOT NULL DEFAULT 0
);
INSERT INTO oplog_0029 (seq, id, time, key_id, key_name, op, result, read_only, repo, refs, objects, bytes,
        duration_us, trace_id, follows, details, prev_hash, hash, idem_key, replays)
    SELECT seq, id, time, key_id, key_name, op, result, read_only, repo, refs, objects, bytes,
        duration_us, trace_id, follows, details, prev_hash, hash, idem_key, replays
    FROM oplog ORDER BY seq;
DROP TABLE oplog;
ALTER TABLE oplog_0029 RENAME TO oplog;
CREATE INDEX oplog_repo ON oplog (repo, seq);
CREATE INDEX oplog_key ON oplog (key_id, seq);
CREATE INDEX oplog_idem ON oplog (key_id, idem_key) WHERE idem_key <> '';
