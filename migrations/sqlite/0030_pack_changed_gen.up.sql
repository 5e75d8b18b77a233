-- Each pack record's generation of its last change (issue #26,
-- docs/replicas.md "Catching up"): a replica's catch-up lists only the
-- records changed after the generation its cache reflects, with the
-- bytes of the inline ones, instead of every record of the network.
-- Existing records take their network's current generation: a cache
-- behind it lists them once, as it listed everything before. 0 marks a
-- record written by an older version during a rolling upgrade: always
-- listed.
ALTER TABLE network_packs ADD COLUMN changed_gen INTEGER NOT NULL DEFAULT 0;
UPDATE network_packs SET changed_gen = COALESCE((SELECT s.generation FROM network_state s WHERE s.network = network_packs.network), 0);
CREATE INDEX network_packs_changed ON network_packs (network, changed_gen);
