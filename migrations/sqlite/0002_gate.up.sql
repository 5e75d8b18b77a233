CREATE TABLE gates (
    repo_id     BIGINT NOT NULL REFERENCES repos (id),
    branch      TEXT NOT NULL,
    policy      TEXT NOT NULL,
    updated_at  BIGINT NOT NULL,
    PRIMARY KEY (repo_id, branch)
);

CREATE TABLE checks (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    network      TEXT NOT NULL,
    commit_oid   TEXT NOT NULL,
    name         TEXT NOT NULL,
    status       TEXT NOT NULL,
    summary      TEXT NOT NULL,
    details_url  TEXT NOT NULL,
    key_name     TEXT NOT NULL,
    created_at   BIGINT NOT NULL
);
CREATE INDEX checks_commit ON checks (network, commit_oid, name, id);

CREATE TABLE hooks (
    id          TEXT PRIMARY KEY,
    repo_id     BIGINT NOT NULL REFERENCES repos (id),
    url         TEXT NOT NULL,
    secret      TEXT NOT NULL,
    events      TEXT NOT NULL,
    active      BOOLEAN NOT NULL,
    created_at  BIGINT NOT NULL
);
CREATE INDEX hooks_repo ON hooks (repo_id);

CREATE TABLE deliveries (
    id               TEXT PRIMARY KEY,
    hook_id          TEXT NOT NULL REFERENCES hooks (id),
    event            TEXT NOT NULL,
    payload          TEXT NOT NULL,
    status           TEXT NOT NULL,
    attempts         INTEGER NOT NULL,
    next_attempt_at  BIGINT NOT NULL,
    locked_until     BIGINT NOT NULL,
    created_at       BIGINT NOT NULL,
    updated_at       BIGINT NOT NULL
);
CREATE INDEX deliveries_due ON deliveries (status, next_attempt_at);
CREATE INDEX deliveries_hook ON deliveries (hook_id, created_at);

CREATE TABLE delivery_attempts (
    id             INTEGER PRIMARY KEY AUTOINCREMENT,
    delivery_id    TEXT NOT NULL REFERENCES deliveries (id),
    attempt        INTEGER NOT NULL,
    status_code    INTEGER NOT NULL,
    duration_us    BIGINT NOT NULL,
    error          TEXT NOT NULL,
    next_retry_at  BIGINT NOT NULL,
    at             BIGINT NOT NULL
);
CREATE INDEX delivery_attempts_delivery ON delivery_attempts (delivery_id, attempt);
