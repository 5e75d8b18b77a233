DROP TABLE run_job_output;
DROP TABLE run_jobs;
DROP TABLE runners;
