-- Workspace listings page by name within a base, optionally by status.
CREATE INDEX repos_fork_name ON repos (fork_of, name);
CREATE INDEX repos_fork_status_name ON repos (fork_of, status, name);
