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

-- generation is bumped by every transaction that changes what a replica's
-- cache of the network must follow: a pack registered or retired, a ref of
-- any repository of the network created, moved or deleted (the triggers
-- below). A network without a row is at generation 0.
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

-- A ref change bumps its network's generation inside its own transaction,
-- whichever statement made it: no writer can forget to.
CREATE FUNCTION refs_bump_generation() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    rid BIGINT;
BEGIN
    IF TG_OP = 'DELETE' THEN
        rid := OLD.repo_id;
    ELSE
        rid := NEW.repo_id;
    END IF;
    INSERT INTO network_state (network, generation)
        SELECT network, 1 FROM repos WHERE id = rid
        ON CONFLICT (network) DO UPDATE SET generation = network_state.generation + 1;
    RETURN NULL;
END
$$;

CREATE TRIGGER refs_bump_generation_insert AFTER INSERT ON refs
    FOR EACH ROW EXECUTE FUNCTION refs_bump_generation();
CREATE TRIGGER refs_bump_generation_update AFTER UPDATE OF oid ON refs
    FOR EACH ROW WHEN (OLD.oid IS DISTINCT FROM NEW.oid) EXECUTE FUNCTION refs_bump_generation();
CREATE TRIGGER refs_bump_generation_delete AFTER DELETE ON refs
    FOR EACH ROW EXECUTE FUNCTION refs_bump_generation();
