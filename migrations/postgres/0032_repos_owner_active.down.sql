DROP INDEX repos_owner_active;
