-- A workspace may carry a task label: several workspaces are often
-- attempts at one task (task-45-try1, task-45-try2).
ALTER TABLE repos ADD COLUMN task TEXT NOT NULL DEFAULT '';
CREATE INDEX repos_fork_task ON repos (fork_of, task);
