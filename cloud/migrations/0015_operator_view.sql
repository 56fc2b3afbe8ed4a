-- The operator's view (issue #17 part 4, docs/api.md "Operator's view"):
-- acknowledging alarms, paging alarms and rejected uplinks newest first, the
-- failing-closed judgement of a gateway's status report, and three webhook
-- events raised by triggers in the transaction of the change they report
-- (like 0006 and 0013), each once per change.

-- Who acknowledged an alarm and when (NULL: open). Set once: the UPDATE that
-- sets them requires acked_at IS NULL, so a second ack changes nothing.
ALTER TABLE alarms ADD COLUMN acked_at bigint;
ALTER TABLE alarms ADD COLUMN acked_by text;
ALTER TABLE alarms ADD COLUMN acked_by_token text;
ALTER TABLE alarms ADD COLUMN acked_cid text;
CREATE INDEX alarms_newest ON alarms (at DESC, alarm_id);
CREATE INDEX rejected_uplinks_newest ON rejected_uplinks (at DESC, id DESC);

-- The cid of the status report last recorded: the gateway.failing_closed
-- webhook carries it, so the event traces to the uplink that reported it.
ALTER TABLE gateways ADD COLUMN last_status_cid text;

-- Why a gateway with this status report denies ordinary keys (CLOUD_STALE)
-- at `p_gateway_now` (its own clock: the cloud's time plus its skew), or NULL
-- when it does not (or there is no report). The gateway's own rule
-- (gateway/src/app/staff-status.ts failClosedReasonOf), in the same order,
-- minus SEQ_CONFLICT, which its status does not carry: no lease; the lease
-- ran out and the cloud has handed out seqs it never applied; the lease ran out.
-- One definition for the health view (adapters/db/gateways.ts) and the trigger below.
CREATE FUNCTION gateway_fail_closed_reason(p_status jsonb, p_gateway_now bigint, p_last_seq bigint) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
  SELECT CASE
    WHEN p_status IS NULL THEN NULL
    WHEN jsonb_typeof(p_status->'leaseExpiresAt') IS DISTINCT FROM 'number' THEN 'NO_LEASE'
    WHEN (p_status->>'leaseExpiresAt')::bigint > p_gateway_now THEN NULL
    WHEN p_last_seq > (p_status->>'appliedSeq')::bigint THEN 'BEHIND_CLOUD'
    ELSE 'LEASE_EXPIRED'
  END
$$;

ALTER TABLE webhook_endpoints DROP CONSTRAINT webhook_endpoints_events_check;
ALTER TABLE webhook_endpoints ADD CONSTRAINT webhook_endpoints_events_check
  CHECK (events <@ ARRAY['key.state_changed', 'access.event', 'alarm', 'downlink.dead_lettered',
                         'alarm.raised', 'gateway.offline', 'gateway.failing_closed']::text[] AND cardinality(events) > 0);

-- alarm.raised: the alarm with its site, on insert. The uplink inserts an
-- alarm ON CONFLICT DO NOTHING, so a redelivered alarm raises nothing again.
-- `alarm` (0006) keeps its body for endpoints that subscribed to it.
CREATE OR REPLACE FUNCTION webhook_on_alarm() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  v_site text := (SELECT site_id FROM gateways WHERE id = NEW.gateway_id);
BEGIN
  PERFORM webhook_enqueue(
    v_site,
    'alarm',
    jsonb_build_object('alarmId', NEW.alarm_id, 'gatewayId', NEW.gateway_id, 'lockId', NEW.lock_id, 'doorId', NEW.door_id,
                       'kind', NEW.kind, 'at', NEW.at),
    NEW.cid, NEW.received_at);
  PERFORM webhook_enqueue(
    v_site,
    'alarm.raised',
    jsonb_build_object('alarmId', NEW.alarm_id, 'siteId', v_site, 'gatewayId', NEW.gateway_id, 'lockId', NEW.lock_id,
                       'doorId', NEW.door_id, 'kind', NEW.kind, 'at', NEW.at, 'receivedAt', NEW.received_at),
    NEW.cid, NEW.received_at);
  RETURN NULL;
END $$;

-- gateway.offline: presence went from online (or never heard) to offline.
-- The retained presence topic is redelivered on every reconnect; the WHEN
-- clause keeps a repeated "offline" from raising the event again.
CREATE FUNCTION webhook_on_gateway_offline() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM webhook_enqueue(
    NEW.site_id,
    'gateway.offline',
    jsonb_build_object('gatewayId', NEW.id, 'siteId', NEW.site_id, 'at', NEW.presence_at, 'lastStatusAt', NEW.last_status_at),
    NULL, NEW.presence_at);
  RETURN NULL;
END $$;
CREATE TRIGGER gateway_offline_webhooks AFTER UPDATE OF online ON gateways FOR EACH ROW
  WHEN (NEW.online IS FALSE AND OLD.online IS DISTINCT FROM FALSE)
  EXECUTE FUNCTION webhook_on_gateway_offline();

-- gateway.failing_closed: a status report that says the gateway fails closed
-- when the one before it did not (or there was none): once per episode, not
-- once per report. A redelivered report is deduped by the uplink inbox first.
CREATE FUNCTION webhook_on_gateway_status() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  v_last_seq bigint := COALESCE((SELECT last_seq FROM gateway_seq WHERE gateway_id = NEW.id), 0);
  v_reason text := gateway_fail_closed_reason(NEW.last_status, NEW.last_status_at + COALESCE(NEW.clock_skew_ms, 0), v_last_seq);
BEGIN
  IF v_reason IS NULL
     OR gateway_fail_closed_reason(OLD.last_status, OLD.last_status_at + COALESCE(OLD.clock_skew_ms, 0), v_last_seq) IS NOT NULL THEN
    RETURN NULL;
  END IF;
  PERFORM webhook_enqueue(
    NEW.site_id,
    'gateway.failing_closed',
    jsonb_build_object('gatewayId', NEW.id, 'siteId', NEW.site_id, 'reason', v_reason,
                       'leaseExpiresAt', NEW.last_status->'leaseExpiresAt', 'appliedSeq', NEW.last_status->'appliedSeq',
                       'lastSeq', v_last_seq, 'at', NEW.last_status_at),
    NEW.last_status_cid, NEW.last_status_at);
  RETURN NULL;
END $$;
CREATE TRIGGER gateway_status_webhooks AFTER UPDATE OF last_status ON gateways FOR EACH ROW
  EXECUTE FUNCTION webhook_on_gateway_status();
