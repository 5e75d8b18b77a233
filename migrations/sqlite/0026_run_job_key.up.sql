-- The agent key a runner acts with for one taken job (issue 24): recorded
-- so that it is revoked as soon as the job ends, however it ends (result
-- posted, lease lost, abandoned); cleared once revoked.
ALTER TABLE run_jobs ADD COLUMN job_key_id TEXT NOT NULL DEFAULT '';
CREATE INDEX run_jobs_job_key ON run_jobs (job_key_id) WHERE job_key_id <> '';
