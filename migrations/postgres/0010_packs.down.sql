DROP TRIGGER refs_bump_generation_delete ON refs;
DROP TRIGGER refs_bump_generation_update ON refs;
DROP TRIGGER refs_bump_generation_insert ON refs;
DROP FUNCTION refs_bump_generation();
DROP INDEX repos_network;
DROP TABLE leases;
DROP TABLE network_state;
DROP TABLE network_packs;
