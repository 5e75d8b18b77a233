-- 0029 rebuilds SQLite's oplog with seq as its rowid (sqlite/0029).
-- PostgreSQL's oplog is unchanged: its primary key on seq is the table's
-- only index on seq already. This file keeps the numbering of both dialects.
SELECT 1;
