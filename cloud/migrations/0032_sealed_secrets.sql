-- 0032: secrets at rest sealed with a key-encryption key (docs/security.md "Secrets at rest").
-- The credential pepper of a gateway and the signing secret of a webhook endpoint are kept
-- sealed (AES-256-GCM under a KEK from the environment, `kek1:<kid>:<nonce>:<ciphertext>:<tag>`),
-- never in clear. SQL cannot seal (it has no KEK), so this only adds the sealed columns and lets
-- the clear ones be empty: a starting cloud seals every clear value and empties its column in the
-- same update (and `secrets rotate` does too). A later migration drops the clear columns, once
-- every replica runs a cloud that no longer writes them (docs/operations.md "Rotating the KEK").

ALTER TABLE gateways ADD COLUMN credential_pepper_sealed text
  CHECK (credential_pepper_sealed ~ '^kek1:[A-Za-z0-9_-]{1,32}:');
ALTER TABLE gateways ALTER COLUMN credential_pepper DROP NOT NULL;
ALTER TABLE gateways ADD CONSTRAINT gateways_pepper_kept
  CHECK (credential_pepper IS NOT NULL OR credential_pepper_sealed IS NOT NULL);

ALTER TABLE webhook_endpoints ADD COLUMN secret_sealed text
  CHECK (secret_sealed ~ '^kek1:[A-Za-z0-9_-]{1,32}:');
ALTER TABLE webhook_endpoints ALTER COLUMN secret DROP NOT NULL;
ALTER TABLE webhook_endpoints ADD CONSTRAINT webhook_endpoints_secret_kept
  CHECK (secret IS NOT NULL OR secret_sealed IS NOT NULL);
