ALTER TABLE network_packs DROP COLUMN idx_data;
ALTER TABLE network_packs DROP COLUMN pack_data;
