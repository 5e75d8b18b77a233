DROP INDEX keys_parent;
ALTER TABLE keys DROP COLUMN quota_workspaces;
ALTER TABLE keys DROP COLUMN scope_owner;
ALTER TABLE keys DROP COLUMN scope_task;
ALTER TABLE keys DROP COLUMN scope_base;
ALTER TABLE keys DROP COLUMN scope_workspace;
ALTER TABLE keys DROP COLUMN parent_key_id;
ALTER TABLE keys DROP COLUMN expires_at;
