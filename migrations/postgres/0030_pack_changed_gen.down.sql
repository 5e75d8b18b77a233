DROP INDEX network_packs_changed;
ALTER TABLE network_packs DROP COLUMN changed_gen;
