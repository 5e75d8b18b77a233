DROP INDEX oplog_idem;
ALTER TABLE oplog DROP COLUMN replays;
ALTER TABLE oplog DROP COLUMN idem_key;
DROP TABLE idempotency_keys;
