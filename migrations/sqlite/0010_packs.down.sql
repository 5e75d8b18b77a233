DROP TRIGGER refs_bump_generation_delete;
DROP TRIGGER refs_bump_generation_update;
DROP TRIGGER refs_bump_generation_insert;
DROP INDEX repos_network;
DROP TABLE leases;
DROP TABLE network_state;
DROP TABLE network_packs;
