DROP TABLE effect_attempts;
DROP TABLE effect_outbox;
DROP TABLE effects;
