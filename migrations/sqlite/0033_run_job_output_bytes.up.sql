-- The bytes of output a run job has stored (its lines' text), so that a
-- post past --run-job-max-output-bytes is cut without summing the job's
-- lines again.
ALTER TABLE run_jobs ADD COLUMN output_bytes INTEGER NOT NULL DEFAULT 0;
