ALTER TABLE run_jobs DROP COLUMN output_bytes;
