-- Stay and payment webhooks for operators (issue #12 "Admin API",
-- docs/api.md "Webhooks"): raised by triggers in the transaction of the
-- status change they report (like 0006, 0013 and 0015). The WHEN clauses
-- fire only when the status column actually changes into the reported
-- state, so a verb's noop (no write, or a write of the same status) raises
-- nothing, and a redelivered Stripe event that changes nothing raises nothing.

ALTER TABLE webhook_endpoints DROP CONSTRAINT webhook_endpoints_events_check;
ALTER TABLE webhook_endpoints ADD CONSTRAINT webhook_endpoints_events_check
  CHECK (events <@ ARRAY['key.state_changed', 'access.event', 'alarm', 'downlink.dead_lettered',
                         'alarm.raised', 'gateway.offline', 'gateway.failing_closed',
                         'stay.confirmed', 'stay.cancelled', 'stay.expired', 'stay.failed', 'stay.checked_out',
                         'payment.succeeded', 'payment.refunded']::text[] AND cardinality(events) > 0);

-- stay.<status>: the stay with its site, the status it reached, the verb's code and cid.
CREATE FUNCTION webhook_on_stay_status() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM webhook_enqueue(
    NEW.site_id,
    'stay.' || NEW.status,
    jsonb_build_object('stayId', NEW.id, 'siteId', NEW.site_id, 'roomId', NEW.room_id, 'personId', NEW.person_id,
                       'status', NEW.status, 'from', OLD.status, 'code', NEW.last_code, 'cancelReason', NEW.cancel_reason,
                       'keyId', NEW.key_id, 'version', NEW.version, 'at', NEW.updated_at),
    NEW.cid, NEW.updated_at);
  RETURN NULL;
END $$;
CREATE TRIGGER stay_status_webhooks AFTER UPDATE OF status ON stays FOR EACH ROW
  WHEN (OLD.status IS DISTINCT FROM NEW.status
        AND NEW.status IN ('confirmed', 'cancelled', 'expired', 'failed', 'checked_out'))
  EXECUTE FUNCTION webhook_on_stay_status();

-- payment.succeeded / payment.refunded: the payment with its stay's site.
-- A partial refund is reported as payment.refunded with amountRefunded < amountReceived;
-- partially_refunded → refunded is a second transition and a second event.
CREATE FUNCTION webhook_on_payment_status() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  v_site text := (SELECT site_id FROM stays WHERE id = NEW.stay_id);
BEGIN
  PERFORM webhook_enqueue(
    v_site,
    CASE WHEN NEW.status = 'succeeded' THEN 'payment.succeeded' ELSE 'payment.refunded' END,
    jsonb_build_object('paymentId', NEW.id, 'stayId', NEW.stay_id, 'siteId', v_site, 'purpose', NEW.purpose,
                       'status', NEW.status, 'from', OLD.status, 'code', NEW.last_code, 'amount', NEW.amount,
                       'currency', NEW.currency, 'amountReceived', NEW.amount_received,
                       'amountRefunded', NEW.amount_refunded, 'version', NEW.version, 'at', NEW.updated_at),
    NEW.cid, NEW.updated_at);
  RETURN NULL;
END $$;
CREATE TRIGGER payment_status_webhooks AFTER UPDATE OF status ON payments FOR EACH ROW
  WHEN (OLD.status IS DISTINCT FROM NEW.status AND NEW.status IN ('succeeded', 'refunded', 'partially_refunded'))
  EXECUTE FUNCTION webhook_on_payment_status();
