ALTER TABLE hooks DROP COLUMN prev_secret_until;
ALTER TABLE hooks DROP COLUMN prev_secret;
