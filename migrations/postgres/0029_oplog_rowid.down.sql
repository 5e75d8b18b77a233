-- Nothing to undo on PostgreSQL (0029 changes SQLite's oplog only).
SELECT 1;
