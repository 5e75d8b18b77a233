-- Minted keys (issue 28): expiry, parent, scope, per-key workspace quota.
ALTER TABLE keys ADD COLUMN expires_at BIGINT;
ALTER TABLE keys ADD COLUMN parent_key_id TEXT;
ALTER TABLE keys ADD COLUMN scope_workspace TEXT;
ALTER TABLE keys ADD COLUMN scope_base TEXT;
ALTER TABLE keys ADD COLUMN scope_task TEXT;
ALTER TABLE keys ADD COLUMN scope_owner TEXT;
ALTER TABLE keys ADD COLUMN quota_workspaces INTEGER;
CREATE INDEX keys_parent ON keys (parent_key_id);
