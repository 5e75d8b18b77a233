-- SQLite moves the chain head inside the entry's INSERT (issue #26, the
-- keyed append's store cost): a trigger, so the head row follows every
-- entry without a second statement from the store (on SQLite each
-- statement the driver runs costs more than the row it writes). The head
-- row stays: `lockstep verify` compares it with the last entry, which is
-- how entries removed from the end are found. PostgreSQL moves its head
-- in the append's own statement (pgfast.go) and has no trigger. A later
-- migration that rebuilds oplog (as 0029 did) drops the trigger with the
-- old table and must create it again; without it the head row would stay
-- behind and the next append would fail on oplog's unique seq, not fork
-- the chain.
CREATE TRIGGER oplog_head_follows AFTER INSERT ON oplog
BEGIN
    UPDATE oplog_head SET seq = NEW.seq, hash = NEW.hash WHERE id = 1;
END;
