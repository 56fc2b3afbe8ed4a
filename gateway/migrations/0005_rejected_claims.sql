-- 0005: rejected downlinks become traceable. Forward-only.

-- What a refused message claimed about itself, read from its JWS payload
-- segment WITHOUT verifying it (it did not verify): its jti, cid, type, seq
-- and issuer, so an operator can look for the cloud's outbox row and log
-- lines. UNVERIFIED: anyone who can publish on the downlink topic chooses
-- these values. A claim is stored only in its protocol form (jti a UUID, cid
-- 1-128 of [A-Za-z0-9_.:-], type 1-64 of the same, seq >= 0, issuer 1-128
-- printable ASCII), else NULL; a payload that is not a decodable JWS has all
-- NULL. Never the payload or its body. Rows written before this migration
-- have NULLs.
ALTER TABLE rejected ADD COLUMN claimed_jti    TEXT    CHECK (claimed_jti IS NULL OR length(claimed_jti) <= 36);
ALTER TABLE rejected ADD COLUMN claimed_cid    TEXT    CHECK (claimed_cid IS NULL OR length(claimed_cid) <= 128);
ALTER TABLE rejected ADD COLUMN claimed_type   TEXT    CHECK (claimed_type IS NULL OR length(claimed_type) <= 64);
ALTER TABLE rejected ADD COLUMN claimed_seq    INTEGER CHECK (claimed_seq IS NULL OR claimed_seq >= 0);
ALTER TABLE rejected ADD COLUMN claimed_issuer TEXT    CHECK (claimed_issuer IS NULL OR length(claimed_issuer) <= 128);

-- Retention (in code, store.ts RetentionLimits): the newest N rows, pruned
-- in the insert's own transaction by id, and an age limit in the hourly
-- purge, which uses the existing index rejected_at (0003).
