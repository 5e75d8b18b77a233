-- Object-storage mode (issue #11, docs/replicas.md): each fork network's
-- packs, its generation and named leases. Times are microseconds since
-- the epoch (BIGINT), as everywhere in this schema; retired_at is NULL
-- while the pack is live.
CREATE TABLE network_packs (
    network        TEXT NOT NULL,
    hash           TEXT NOT NULL,
    pack_bytes     BIGINT NOT NULL,
    idx_bytes      BIGINT NOT NULL,
    objects        BIGINT NOT NULL,
    registered_at  BIGINT NOT NULL,
    retired_at     BIGINT,
    PRIMARY KEY (network, hash)
);
-- The live list of a network, oldest first.
CREATE INDEX network_packs_live ON network_packs (network, registered_at) WHERE retired_at IS NULL;

-- generation is bumped by every transaction that changes the network's
-- pack list (a pack registered, or packs replaced by a compaction): what a
-- replica's cache must follow. Ref moves do not bump it: every ref names
-- objects of packs registered before it moved, and a cache that misses
-- an object catches up. A network without a row is at generation 0.
CREATE TABLE network_state (
    network     TEXT PRIMARY KEY,
    generation  BIGINT NOT NULL
);

CREATE TABLE leases (
    name        TEXT PRIMARY KEY,
    holder      TEXT NOT NULL,
    expires_at  BIGINT NOT NULL
);

-- NetworkRefs reads every ref of a network.
CREATE INDEX repos_network ON repos (network, name);
