-- Per-key overrides of the storage-bytes and concurrent-runs quotas
-- (issue 28 item 3): NULL is the server-wide setting, 0 unlimited.
ALTER TABLE keys ADD COLUMN quota_storage_bytes BIGINT;
ALTER TABLE keys ADD COLUMN quota_runs INTEGER;
