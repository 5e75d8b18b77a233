CREATE TABLE keys (
    id            TEXT PRIMARY KEY,
    name          TEXT NOT NULL,
    role          TEXT NOT NULL,
    prefix        TEXT NOT NULL UNIQUE,
    hash          BLOB NOT NULL,
    created_at    BIGINT NOT NULL,
    revoked_at    BIGINT,
    last_used_at  BIGINT
);

CREATE TABLE oplog (
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
    hash         TEXT NOT NULL
);
CREATE INDEX oplog_repo ON oplog (repo, seq);
CREATE INDEX oplog_key ON oplog (key_id, seq);

CREATE TABLE oplog_head (
    id    INTEGER PRIMARY KEY CHECK (id = 1),
    seq   BIGINT NOT NULL,
    hash  TEXT NOT NULL
);
INSERT INTO oplog_head (id, seq, hash) VALUES (1, 0, '');

CREATE TABLE repos (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    name            TEXT NOT NULL UNIQUE,
    network         TEXT NOT NULL,
    fork_of         TEXT NOT NULL,
    default_branch  TEXT NOT NULL,
    status          TEXT NOT NULL,
    owner_key_id    TEXT NOT NULL,
    owner_name      TEXT NOT NULL,
    base_commit     TEXT NOT NULL,
    created_at      BIGINT NOT NULL,
    updated_at      BIGINT NOT NULL
);
CREATE INDEX repos_fork_of ON repos (fork_of);

CREATE TABLE refs (
    repo_id     BIGINT NOT NULL REFERENCES repos (id),
    name        TEXT NOT NULL,
    oid         TEXT NOT NULL,
    updated_at  BIGINT NOT NULL,
    PRIMARY KEY (repo_id, name)
);

CREATE TABLE attempts (
    seq         INTEGER PRIMARY KEY AUTOINCREMENT,
    repo_id     BIGINT NOT NULL REFERENCES repos (id),
    commit_oid  TEXT NOT NULL,
    tree_oid    TEXT NOT NULL,
    branch      TEXT NOT NULL,
    op          TEXT NOT NULL,
    key_name    TEXT NOT NULL,
    created_at  BIGINT NOT NULL
);
CREATE INDEX attempts_repo ON attempts (repo_id, seq);
