-- A downlink the dispatcher gives up on (dead-lettered) is an operator alarm:
-- the gateway stays behind and fails closed once its lease runs out unless a
-- resync brings it. Webhook event `downlink.dead_lettered`, written in the
-- transaction that dead-letters the row, like the other events (0006).
ALTER TABLE webhook_endpoints DROP CONSTRAINT webhook_endpoints_events_check;
ALTER TABLE webhook_endpoints ADD CONSTRAINT webhook_endpoints_events_check
  CHECK (events <@ ARRAY['key.state_changed', 'access.event', 'alarm', 'downlink.dead_lettered']::text[] AND cardinality(events) > 0);

CREATE FUNCTION webhook_on_outbox_dead() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM webhook_enqueue(
    (SELECT site_id FROM gateways WHERE id = NEW.gateway_id),
    'downlink.dead_lettered',
    jsonb_build_object('gatewayId', NEW.gateway_id, 'seq', NEW.seq, 'type', NEW.type, 'keyId', NEW.key_id, 'keyVersion', NEW.key_version,
                       'attempts', NEW.attempts, 'lastError', NEW.last_error, 'at', NEW.next_attempt_at),
    NEW.cid, NEW.next_attempt_at);
  RETURN NULL;
END $$;
CREATE TRIGGER outbox_dead_webhooks AFTER UPDATE OF status ON outbox FOR EACH ROW
  WHEN (NEW.status = 'dead' AND OLD.status IS DISTINCT FROM 'dead')
  EXECUTE FUNCTION webhook_on_outbox_dead();
