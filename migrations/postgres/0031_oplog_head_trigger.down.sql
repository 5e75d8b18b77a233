-- Nothing to undo on PostgreSQL (0031 changes SQLite's schema only).
SELECT 1;
