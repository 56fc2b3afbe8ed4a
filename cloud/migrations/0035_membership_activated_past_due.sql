-- An application can become past_due directly (MEMBERSHIP_ACTIVATED_PAST_DUE: the first period was paid and a
-- renewal failed before the activation was learned). It was activated all the same: membership.activated is
-- raised on applied → active and on applied → past_due, with `status` saying which.
CREATE OR REPLACE FUNCTION webhook_on_membership_status() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM webhook_enqueue(
    NEW.site_id,
    CASE WHEN NEW.status IN ('active', 'past_due') THEN 'membership.activated' ELSE 'membership.ended' END,
    jsonb_build_object('membershipId', NEW.id, 'siteId', NEW.site_id, 'planId', NEW.plan_id, 'personId', NEW.person_id,
                       'status', NEW.status, 'from', OLD.status, 'code', NEW.last_code, 'endReason', NEW.end_reason,
                       'keyId', NEW.key_id, 'version', NEW.version, 'at', NEW.updated_at),
    NEW.cid, NEW.updated_at);
  RETURN NULL;
END $$;
DROP TRIGGER membership_status_webhooks ON memberships;
CREATE TRIGGER membership_status_webhooks AFTER UPDATE OF status ON memberships FOR EACH ROW
  WHEN (OLD.status IS DISTINCT FROM NEW.status
        AND ((NEW.status IN ('active', 'past_due') AND OLD.status = 'applied') OR NEW.status IN ('ended', 'rejected')))
  EXECUTE FUNCTION webhook_on_membership_status();
