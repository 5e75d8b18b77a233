ALTER TABLE network_state DROP COLUMN gc_at;
