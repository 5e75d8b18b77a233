ALTER TABLE checkpoints DROP COLUMN redis_snapshot;
