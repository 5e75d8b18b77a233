-- The active workspaces a key owns, counted by the workspace quota on
-- every fork (inside the fork's transaction, under the oplog head's lock),
-- by whoami and by the keys page: without it each count read every
-- repository row.
CREATE INDEX repos_owner_active ON repos (owner_key_id) WHERE status = 'active' AND fork_of <> '';
