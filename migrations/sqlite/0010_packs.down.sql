DROP INDEX repos_network;
DROP TABLE leases;
DROP TABLE network_state;
DROP TABLE network_packs;
