DROP TABLE retention_policies;
