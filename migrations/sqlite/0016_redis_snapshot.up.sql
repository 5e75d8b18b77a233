-- A checkpoint's Redis snapshot (redisbranch), beside its database snapshot.
ALTER TABLE checkpoints ADD COLUMN redis_snapshot TEXT NOT NULL DEFAULT '';
