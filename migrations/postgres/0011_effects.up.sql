-- The effects outbox (README "Effects outbox"): outward HTTP effects
-- staged on a workspace, released when it is promoted. seq is the
-- operations-log seq of the staging entry (a total order shared with
-- checkpoints). Header values named in request/compensation "secret" are
-- AES-256-GCM ciphertext ("lsenc1:…").
CREATE TABLE effects (
    id                  TEXT PRIMARY KEY,
    seq                 BIGINT NOT NULL UNIQUE,
    repo_id             BIGINT NOT NULL REFERENCES repos(id),
    status              TEXT NOT NULL,
    request             TEXT NOT NULL,
    body                BYTEA,
    compensation        TEXT NOT NULL DEFAULT '',
    comp_body           BYTEA,
    comp_status         TEXT NOT NULL DEFAULT '',
    label               TEXT NOT NULL DEFAULT '',
    class               TEXT NOT NULL DEFAULT '',
    run_id              TEXT NOT NULL DEFAULT '',
    consuming           BOOLEAN NOT NULL DEFAULT FALSE,
    discard_reason      TEXT NOT NULL DEFAULT '',
    released_into       BIGINT NOT NULL DEFAULT 0,
    released_commit     TEXT NOT NULL DEFAULT '',
    attempts            INTEGER NOT NULL DEFAULT 0,
    last_status_code    INTEGER NOT NULL DEFAULT 0,
    last_error          TEXT NOT NULL DEFAULT '',
    key_name            TEXT NOT NULL DEFAULT '',
    created_at          BIGINT NOT NULL,
    updated_at          BIGINT NOT NULL
);
CREATE INDEX effects_repo ON effects (repo_id, seq);
CREATE INDEX effects_released ON effects (released_into, released_commit);

-- One row per request to send: an effect (lane "e<repo id>", ord = seq)
-- or its compensation (lane "c<repo id>", ord = -seq, newest first).
CREATE TABLE effect_outbox (
    id               TEXT PRIMARY KEY,
    effect_id        TEXT NOT NULL REFERENCES effects(id),
    kind             TEXT NOT NULL,
    lane             TEXT NOT NULL,
    ord              BIGINT NOT NULL,
    status           TEXT NOT NULL,
    attempts         INTEGER NOT NULL DEFAULT 0,
    next_attempt_at  BIGINT NOT NULL,
    locked_until     BIGINT NOT NULL DEFAULT 0,
    created_at       BIGINT NOT NULL,
    updated_at       BIGINT NOT NULL
);
CREATE INDEX effect_outbox_due ON effect_outbox (status, next_attempt_at);
CREATE INDEX effect_outbox_lane ON effect_outbox (lane, ord);

CREATE TABLE effect_attempts (
    outbox_id    TEXT NOT NULL REFERENCES effect_outbox(id),
    effect_id    TEXT NOT NULL,
    kind         TEXT NOT NULL,
    attempt      INTEGER NOT NULL,
    status_code  INTEGER NOT NULL,
    duration_us  BIGINT NOT NULL,
    error        TEXT NOT NULL DEFAULT '',
    at           BIGINT NOT NULL
);
CREATE INDEX effect_attempts_effect ON effect_attempts (effect_id, at);
