DROP TABLE checkpoints;
