-- Back to the schema of 0001 and 0005: seq a BIGINT PRIMARY KEY (a unique
-- index beside the rowid). Every column is copied as stored.
CREATE TABLE oplog_0028 (
    seq          BIGINT PRIMARY KEY,
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
INSERT INTO oplog_0028 (seq, id, time, key_id, key_name, op, result, read_only, repo, refs, objects, bytes,
        duration_us, trace_id, follows, details, prev_hash, hash, idem_key, replays)
    SELECT seq, id, time, key_id, key_name, op, result, read_only, repo, refs, objects, bytes,
        duration_us, trace_id, follows, details, prev_hash, hash, idem_key, replays
    FROM oplog ORDER BY seq;
DROP TABLE oplog;
ALTER TABLE oplog_0028 RENAME TO oplog;
CREATE INDEX oplog_repo ON oplog (repo, seq);
CREATE INDEX oplog_key ON oplog (key_id, seq);
CREATE INDEX oplog_idem ON oplog (key_id, idem_key) WHERE idem_key <> '';
