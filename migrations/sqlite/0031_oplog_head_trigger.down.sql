-- The store moves the head with its own UPDATE again (before 0031).
DROP TRIGGER IF EXISTS oplog_head_follows;
