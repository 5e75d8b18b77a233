DROP INDEX repos_fork_status_name;
DROP INDEX repos_fork_name;
