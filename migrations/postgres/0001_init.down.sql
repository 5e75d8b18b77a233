DROP TABLE attempts;
DROP TABLE refs;
DROP TABLE repos;
DROP TABLE oplog_head;
DROP TABLE oplog;
DROP TABLE keys;
