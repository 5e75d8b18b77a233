ALTER TABLE keys DROP COLUMN quota_runs;
ALTER TABLE keys DROP COLUMN quota_storage_bytes;
