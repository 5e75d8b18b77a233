DROP INDEX repos_fork_task;
ALTER TABLE repos DROP COLUMN task;
