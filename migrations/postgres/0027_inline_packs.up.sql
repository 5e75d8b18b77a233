-- Small packs kept in the metadata database (issue #26, docs/replicas.md
-- "Small packs"): a pack no larger than --object-inline-max (pack plus
-- index) is stored in its own record instead of the bucket, registered
-- with its bytes in one transaction. NULL: the pack is in the bucket.
ALTER TABLE network_packs ADD COLUMN pack_data BYTEA;
ALTER TABLE network_packs ADD COLUMN idx_data BYTEA;
