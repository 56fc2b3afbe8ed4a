-- Tobira cloud core: sites, gateways, doors, people, entry keys, key history,
-- per-gateway outbox with gap-free seq, uplink inbox, audit, rejected uplinks.
-- Times are bigint epoch milliseconds supplied by the application clock.

CREATE TABLE sites (
  id text PRIMARY KEY,
  name text NOT NULL,
  time_zone text NOT NULL,
  offline_grace_seconds int NOT NULL CHECK (offline_grace_seconds >= 0),
  created_at bigint NOT NULL
);

CREATE TABLE gateways (
  id text PRIMARY KEY,
  site_id text NOT NULL REFERENCES sites(id),
  public_jwk jsonb NOT NULL,
  -- base64url secret the gateway receives at provisioning; credential digests are HMACs keyed with it
  credential_pepper text NOT NULL,
  online boolean NOT NULL DEFAULT false,
  last_status jsonb,
  last_status_at bigint,
  created_at bigint NOT NULL
);

CREATE TABLE doors (
  id text PRIMARY KEY,
  site_id text NOT NULL REFERENCES sites(id),
  gateway_id text NOT NULL REFERENCES gateways(id),
  name text NOT NULL,
  created_at bigint NOT NULL
);

CREATE TABLE people (
  id text PRIMARY KEY,
  name text NOT NULL,
  created_at bigint NOT NULL
);

CREATE TABLE keys (
  id text PRIMARY KEY,
  person_id text NOT NULL REFERENCES people(id),
  gateway_id text NOT NULL REFERENCES gateways(id),
  credential_type text NOT NULL CHECK (credential_type IN ('pin', 'card', 'mobile')),
  -- HMAC-SHA256(gateway pepper, type:value), base64url; the credential is never stored in clear
  credential_digest text NOT NULL CHECK (credential_digest ~ '^[A-Za-z0-9_-]{43}$'),
  doors jsonb NOT NULL,
  valid_from bigint NOT NULL,
  valid_until bigint NOT NULL,
  schedule jsonb,
  offline_capable boolean NOT NULL,
  -- the key version on the wire: grows on issue and revoke, never shrinks
  version int NOT NULL CHECK (version > 0),
  -- the row revision: compare-and-set counter, grows on every write
  revision int NOT NULL CHECK (revision > 0),
  status text NOT NULL CHECK (status IN ('issuing', 'active', 'revoking', 'revoked', 'expired', 'failed')),
  revoke_reason text,
  last_code text NOT NULL,
  cid text NOT NULL,
  created_at bigint NOT NULL,
  updated_at bigint NOT NULL,
  CHECK (valid_from < valid_until)
);
CREATE INDEX keys_expiry ON keys (valid_until) WHERE status IN ('issuing', 'active');
-- a presented credential must match at most one live key at its gateway
CREATE UNIQUE INDEX keys_live_credential ON keys (gateway_id, credential_digest) WHERE status IN ('issuing', 'active');

-- I4: a key's status changes only inside a verb's transaction, which sets
-- the transaction-local setting tobira.verb (set_config(..., true)).
CREATE FUNCTION keys_status_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF coalesce(current_setting('tobira.verb', true), '') = '' THEN
    RAISE EXCEPTION 'keys.status may only change inside a key verb (tobira.verb unset)' USING ERRCODE = 'P0001';
  END IF;
  IF TG_OP = 'UPDATE' AND NEW.version < OLD.version THEN
    RAISE EXCEPTION 'keys.version may not shrink' USING ERRCODE = 'P0001';
  END IF;
  RETURN NEW;
END $$;
CREATE TRIGGER keys_status_insert BEFORE INSERT ON keys FOR EACH ROW EXECUTE FUNCTION keys_status_guard();
CREATE TRIGGER keys_status_update BEFORE UPDATE ON keys FOR EACH ROW
  WHEN (OLD.status IS DISTINCT FROM NEW.status OR OLD.version IS DISTINCT FROM NEW.version)
  EXECUTE FUNCTION keys_status_guard();

CREATE TABLE key_history (
  id bigserial PRIMARY KEY,
  key_id text NOT NULL REFERENCES keys(id),
  version int NOT NULL,
  revision int NOT NULL,
  event text NOT NULL CHECK (event IN ('issue', 'grant_applied', 'grant_rejected', 'revoke', 'revoke_applied', 'validity_ended')),
  from_status text,
  to_status text NOT NULL,
  reason text,
  code text NOT NULL,
  cid text NOT NULL,
  verb text NOT NULL,
  detail jsonb,
  at bigint NOT NULL,
  UNIQUE (key_id, revision)
);

CREATE FUNCTION key_history_immutable() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'key_history is append-only' USING ERRCODE = 'P0001';
END $$;
CREATE TRIGGER key_history_no_update BEFORE UPDATE OR DELETE ON key_history FOR EACH ROW EXECUTE FUNCTION key_history_immutable();
CREATE TRIGGER key_history_no_truncate BEFORE TRUNCATE ON key_history FOR EACH STATEMENT EXECUTE FUNCTION key_history_immutable();

-- The per-gateway counter: the row is locked by the UPDATE that takes the
-- next seq, so seqs are gap-free (a rollback undoes the increment).
CREATE TABLE gateway_seq (
  gateway_id text PRIMARY KEY REFERENCES gateways(id),
  last_seq bigint NOT NULL DEFAULT 0
);

CREATE TABLE outbox (
  id bigserial PRIMARY KEY,
  gateway_id text NOT NULL REFERENCES gateways(id),
  seq bigint NOT NULL,
  jti uuid NOT NULL UNIQUE,
  type text NOT NULL CHECK (type IN ('key.grant', 'key.revoke')),
  key_id text,
  key_version int,
  body jsonb NOT NULL,
  cid text NOT NULL,
  status text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'sending', 'sent', 'dead')),
  attempts int NOT NULL DEFAULT 0,
  next_attempt_at bigint NOT NULL,
  lease_token uuid,
  lease_until bigint,
  last_error text,
  created_at bigint NOT NULL,
  sent_at bigint,
  UNIQUE (gateway_id, seq),
  CHECK ((status = 'sending') = (lease_token IS NOT NULL))
);
CREATE INDEX outbox_due ON outbox (next_attempt_at) WHERE status = 'pending';
CREATE INDEX outbox_leased ON outbox (lease_until) WHERE status = 'sending';
CREATE INDEX outbox_dead ON outbox (gateway_id, seq) WHERE status = 'dead';

CREATE TABLE uplink_inbox (
  jti uuid PRIMARY KEY,
  gateway_id text NOT NULL REFERENCES gateways(id),
  type text NOT NULL,
  seq bigint,
  cid text NOT NULL,
  result text NOT NULL,
  code text NOT NULL,
  received_at bigint NOT NULL
);
CREATE UNIQUE INDEX uplink_inbox_seq ON uplink_inbox (gateway_id, seq) WHERE seq IS NOT NULL;

-- Per-gateway uplink seq tracking: the highest seq seen; gaps are the
-- missing seqs below it (see listUplinkGaps).
CREATE TABLE uplink_seq (
  gateway_id text PRIMARY KEY REFERENCES gateways(id),
  max_seq bigint NOT NULL,
  received bigint NOT NULL
);

CREATE TABLE audit (
  event_id uuid PRIMARY KEY,
  gateway_id text NOT NULL REFERENCES gateways(id),
  seq bigint NOT NULL,
  jti uuid NOT NULL,
  lock_id text NOT NULL,
  door_id text,
  at bigint NOT NULL,
  allowed boolean NOT NULL,
  code text NOT NULL,
  key_id text,
  key_version int,
  person_id text,
  credential_type text,
  command_id uuid,
  cid text NOT NULL,
  received_at bigint NOT NULL
);
CREATE INDEX audit_at ON audit (at);

CREATE TABLE alarms (
  alarm_id uuid PRIMARY KEY,
  gateway_id text NOT NULL REFERENCES gateways(id),
  lock_id text NOT NULL,
  door_id text,
  kind text NOT NULL,
  at bigint NOT NULL,
  cid text NOT NULL,
  received_at bigint NOT NULL
);

CREATE TABLE rejected_uplinks (
  id bigserial PRIMARY KEY,
  gateway_id text,
  topic text NOT NULL,
  code text NOT NULL,
  detail text NOT NULL,
  jti text,
  at bigint NOT NULL
);
