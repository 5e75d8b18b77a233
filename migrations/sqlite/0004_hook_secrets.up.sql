-- Hook secret rotation: the previous secret keeps signing deliveries (a
-- second v1 signature) until prev_secret_until (unix microseconds).
-- secret and prev_secret hold AES-256-GCM ciphertext ("lsenc1:…"); rows
-- written before this version are encrypted by the server at start-up.
ALTER TABLE hooks ADD COLUMN prev_secret TEXT NOT NULL DEFAULT '';
ALTER TABLE hooks ADD COLUMN prev_secret_until BIGINT NOT NULL DEFAULT 0;
