-- 0031 adds a trigger to SQLite's oplog that moves the head row
-- (sqlite/0031). PostgreSQL is unchanged: an append locks the head row
-- (SELECT ... FOR UPDATE, which keeps the chain linear across replicas)
-- and moves it in the same statement as its insert (pgfast.go). This file
-- keeps the numbering of both dialects.
SELECT 1;
