-- Webhooks (events out): endpoints per site, an outbox filled by triggers in
-- the same transaction as the change it reports (key transitions, access
-- events, alarms), and a log of every delivery attempt.

CREATE TABLE webhook_endpoints (
  id text PRIMARY KEY,
  site_id text NOT NULL REFERENCES sites(id),
  url text NOT NULL CHECK (url ~ '^https?://'),
  -- HMAC-SHA256 key of the signature header; shown once at creation
  secret text NOT NULL,
  events text[] NOT NULL CHECK (events <@ ARRAY['key.state_changed', 'access.event', 'alarm']::text[] AND cardinality(events) > 0),
  enabled boolean NOT NULL DEFAULT true,
  created_at bigint NOT NULL
);
CREATE INDEX webhook_endpoints_site ON webhook_endpoints (site_id) WHERE enabled;

CREATE TABLE webhook_outbox (
  id bigserial PRIMARY KEY,
  endpoint_id text NOT NULL REFERENCES webhook_endpoints(id),
  event_id uuid NOT NULL DEFAULT gen_random_uuid(),
  type text NOT NULL,
  body jsonb NOT NULL,
  cid text,
  status text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'sending', 'delivered', 'dead')),
  attempts int NOT NULL DEFAULT 0,
  next_attempt_at bigint NOT NULL,
  lease_token uuid,
  lease_until bigint,
  last_error text,
  created_at bigint NOT NULL,
  delivered_at bigint,
  UNIQUE (endpoint_id, event_id),
  CHECK ((status = 'sending') = (lease_token IS NOT NULL))
);
CREATE INDEX webhook_outbox_due ON webhook_outbox (next_attempt_at) WHERE status = 'pending';
CREATE INDEX webhook_outbox_leased ON webhook_outbox (lease_until) WHERE status = 'sending';

CREATE TABLE webhook_deliveries (
  id bigserial PRIMARY KEY,
  outbox_id bigint NOT NULL REFERENCES webhook_outbox(id),
  endpoint_id text NOT NULL,
  attempt int NOT NULL,
  status_code int,
  error text,
  at bigint NOT NULL
);
CREATE INDEX webhook_deliveries_endpoint ON webhook_deliveries (endpoint_id, id);

CREATE FUNCTION webhook_enqueue(p_site text, p_type text, p_body jsonb, p_cid text, p_at bigint) RETURNS void LANGUAGE sql AS $$
  INSERT INTO webhook_outbox (endpoint_id, type, body, cid, next_attempt_at, created_at)
  SELECT e.id, p_type, p_body, p_cid, p_at, p_at FROM webhook_endpoints e
   WHERE e.site_id = p_site AND e.enabled AND p_type = ANY(e.events);
$$;

CREATE FUNCTION webhook_on_key_history() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM webhook_enqueue(
    (SELECT g.site_id FROM keys k JOIN gateways g ON g.id = k.gateway_id WHERE k.id = NEW.key_id),
    'key.state_changed',
    jsonb_build_object('keyId', NEW.key_id, 'event', NEW.event, 'from', NEW.from_status, 'to', NEW.to_status,
                       'code', NEW.code, 'reason', NEW.reason, 'version', NEW.version, 'at', NEW.at),
    NEW.cid, NEW.at);
  RETURN NULL;
END $$;
CREATE TRIGGER key_history_webhooks AFTER INSERT ON key_history FOR EACH ROW EXECUTE FUNCTION webhook_on_key_history();

CREATE FUNCTION webhook_on_audit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM webhook_enqueue(
    (SELECT site_id FROM gateways WHERE id = NEW.gateway_id),
    'access.event',
    jsonb_build_object('eventId', NEW.event_id, 'gatewayId', NEW.gateway_id, 'lockId', NEW.lock_id, 'doorId', NEW.door_id,
                       'at', NEW.at, 'allowed', NEW.allowed, 'code', NEW.code, 'keyId', NEW.key_id, 'personId', NEW.person_id),
    NEW.cid, NEW.received_at);
  RETURN NULL;
END $$;
CREATE TRIGGER audit_webhooks AFTER INSERT ON audit FOR EACH ROW EXECUTE FUNCTION webhook_on_audit();

CREATE FUNCTION webhook_on_alarm() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM webhook_enqueue(
    (SELECT site_id FROM gateways WHERE id = NEW.gateway_id),
    'alarm',
    jsonb_build_object('alarmId', NEW.alarm_id, 'gatewayId', NEW.gateway_id, 'lockId', NEW.lock_id, 'doorId', NEW.door_id,
                       'kind', NEW.kind, 'at', NEW.at),
    NEW.cid, NEW.received_at);
  RETURN NULL;
END $$;
CREATE TRIGGER alarms_webhooks AFTER INSERT ON alarms FOR EACH ROW EXECUTE FUNCTION webhook_on_alarm();
