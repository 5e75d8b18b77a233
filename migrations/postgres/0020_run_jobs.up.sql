-- Runners and run jobs (issue 24): runners registered by `lockstep runner
-- --jobs`, the jobs they take (a lease the runner renews) and their output
-- lines. In the metadata database so that every replica shares them.
CREATE TABLE runners (
    id          TEXT PRIMARY KEY,
    key_id      TEXT NOT NULL,
    name        TEXT NOT NULL,
    workspaces  TEXT NOT NULL,
    created_at  BIGINT NOT NULL,
    last_seen   BIGINT NOT NULL,
    UNIQUE (key_id, name)
);
CREATE TABLE run_jobs (
    id          TEXT PRIMARY KEY,
    workspace   TEXT NOT NULL,
    key_id      TEXT NOT NULL,
    spec        TEXT NOT NULL,
    state       TEXT NOT NULL,
    runner_id   TEXT NOT NULL DEFAULT '',
    lease_until BIGINT,
    result      TEXT NOT NULL DEFAULT '',
    error       TEXT NOT NULL DEFAULT '',
    created_at  BIGINT NOT NULL,
    updated_at  BIGINT NOT NULL
);
CREATE INDEX run_jobs_state ON run_jobs (state, created_at);
CREATE TABLE run_job_output (
    job_id  TEXT NOT NULL,
    seq     BIGINT NOT NULL,
    stream  TEXT NOT NULL,
    line    TEXT NOT NULL,
    PRIMARY KEY (job_id, seq)
);
