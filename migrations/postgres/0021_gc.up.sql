-- Object GC (issue 28 item 1, docs/replicas.md "Object GC"): gc_at is the
-- time (microseconds) of the last GC that dropped objects of the network.
-- A ref move whose objects were checked before it is refused, so a write
-- racing a GC never names an object the GC dropped.
ALTER TABLE network_state ADD COLUMN gc_at BIGINT NOT NULL DEFAULT 0;
