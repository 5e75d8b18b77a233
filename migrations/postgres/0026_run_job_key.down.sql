DROP INDEX run_jobs_job_key;
ALTER TABLE run_jobs DROP COLUMN job_key_id;
