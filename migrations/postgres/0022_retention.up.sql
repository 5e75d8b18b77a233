-- Retention policies per base repository (issue 28 item 2): seconds,
-- 0 = off; archive_failed 1 keeps a failed workspace's attempts on
-- refs/archive/<workspace>/<n> in the base before it is purged.
CREATE TABLE retention_policies (
    repo_id          BIGINT NOT NULL PRIMARY KEY REFERENCES repos (id),
    abandon_after_s  BIGINT NOT NULL DEFAULT 0,
    delete_after_s   BIGINT NOT NULL DEFAULT 0,
    archive_failed   INTEGER NOT NULL DEFAULT 0,
    updated_at       BIGINT NOT NULL
);
