-- A stay's guest credential chosen at booking (issue #12, docs/payments.md):
-- only its type and keyed digest (HMAC with the room gateway's pepper), never
-- the clear value; the confirming transaction issues the stay key with it.
-- Both null: the stay gets a random PIN at confirmation (the behaviour before).
ALTER TABLE stays ADD COLUMN credential_type text CHECK (credential_type IN ('pin', 'card'));
ALTER TABLE stays ADD COLUMN credential_digest text;
ALTER TABLE stays ADD CONSTRAINT stays_credential_whole CHECK ((credential_type IS NULL) = (credential_digest IS NULL));
