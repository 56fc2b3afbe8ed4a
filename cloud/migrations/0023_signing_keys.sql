-- Signing-key rotation (issue #17, docs/operations.md "Rotating the cloud signing key").
-- The private parts stay in CLOUD_SIGNING_JWK (every replica); this table holds each key's
-- public JWK and where it is in its life, so that every replica signs with the same key:
--   staged (loaded from CLOUD_SIGNING_JWK, unknown to gateways) → published (in the JWKS,
--   a keyset.update adding it queued for every gateway) → signing (exactly one) →
--   previous (signed before; still trusted) → retired (a keyset.update retiring it queued).
CREATE TABLE signing_keys (
  kid          text PRIMARY KEY,
  public_jwk   jsonb  NOT NULL,
  status       text   NOT NULL CHECK (status IN ('staged', 'published', 'signing', 'previous', 'retired')),
  -- when it was published (the JWKS's nbf); null while staged
  not_before   bigint,
  -- announced when it stopped signing, set to the retire time when retired
  retire_after bigint,
  -- when live grants were last re-sent under a later signer (the retire step needs it)
  resigned_at  bigint,
  created_at   bigint NOT NULL,
  updated_at   bigint NOT NULL
);
-- one signer at a time, whatever the replicas do
CREATE UNIQUE INDEX signing_keys_one_signer ON signing_keys ((true)) WHERE status = 'signing';

-- One row per (key, step, gateway): the keyset.update queued for it, and its gateway's ack.
CREATE TABLE signing_key_deliveries (
  kid        text   NOT NULL REFERENCES signing_keys(kid),
  step       text   NOT NULL CHECK (step IN ('publish', 'retire')),
  gateway_id text   NOT NULL REFERENCES gateways(id),
  jti        text   NOT NULL UNIQUE,
  seq        bigint NOT NULL,
  queued_at  bigint NOT NULL,
  acked_at   bigint,
  result     text,
  code       text,
  PRIMARY KEY (kid, step, gateway_id)
);

-- The outbox carries keyset.update rows too (the gateway applies them in seq order with the grants).
ALTER TABLE outbox DROP CONSTRAINT outbox_type_check;
ALTER TABLE outbox ADD CONSTRAINT outbox_type_check CHECK (type IN ('key.grant', 'key.revoke', 'keyset.update'));
