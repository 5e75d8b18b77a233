CREATE TABLE checkpoints (
    id           TEXT PRIMARY KEY,
    repo_id      BIGINT NOT NULL REFERENCES repos (id),
    branch       TEXT NOT NULL,
    commit_oid   TEXT NOT NULL,
    tree_oid     TEXT NOT NULL,
    db_snapshot  TEXT NOT NULL,
    fs_snapshot  TEXT NOT NULL,
    label        TEXT NOT NULL,
    key_name     TEXT NOT NULL,
    op_id        TEXT NOT NULL,
    duration_us  BIGINT NOT NULL,
    created_at   BIGINT NOT NULL
);
CREATE INDEX checkpoints_repo ON checkpoints (repo_id, created_at);
