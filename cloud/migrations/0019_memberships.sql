-- Memberships billed by Stripe subscriptions (issue #13, docs/memberships.md).
--
-- A plan is what a site sells: a recurring price, the doors a member opens,
-- whether it is members-only, a monthly entry quota (stored; quotas are
-- enforced by a later step) and the grace a past-due member keeps access.
CREATE TABLE plans (
  id text PRIMARY KEY,
  site_id text NOT NULL REFERENCES sites(id),
  name text NOT NULL,
  amount bigint NOT NULL CHECK (amount > 0),
  currency text NOT NULL CHECK (currency ~ '^[a-z]{3}$'),
  billing_interval text NOT NULL CHECK (billing_interval IN ('day', 'week', 'month', 'year')),
  interval_count int NOT NULL DEFAULT 1 CHECK (interval_count BETWEEN 1 AND 12),
  members_only boolean NOT NULL DEFAULT false,
  monthly_entry_quota int CHECK (monthly_entry_quota >= 0),
  grace_seconds int NOT NULL CHECK (grace_seconds >= 0),
  status text NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'retired')),
  -- the Stripe Price, created once with the idempotency key price:<planId>
  stripe_price_id text,
  created_at bigint NOT NULL,
  updated_at bigint NOT NULL,
  retired_at bigint,
  UNIQUE (site_id, name),
  CHECK ((status = 'retired') = (retired_at IS NOT NULL))
);

CREATE TABLE plan_doors (
  plan_id text NOT NULL REFERENCES plans(id),
  door_id text NOT NULL REFERENCES doors(id),
  PRIMARY KEY (plan_id, door_id)
);

-- One membership per application. Its subscription's idempotency key
-- (membership_initial:<id>:<attempt>) is stored before the first Stripe call.
CREATE TABLE memberships (
  id text PRIMARY KEY,
  site_id text NOT NULL REFERENCES sites(id),
  plan_id text NOT NULL REFERENCES plans(id),
  person_id text NOT NULL REFERENCES people(id),
  status text NOT NULL CHECK (status IN ('applied', 'active', 'past_due', 'ending', 'ended', 'rejected')),
  version int NOT NULL CHECK (version > 0),
  approved_at bigint,
  approved_by text,
  attempt int NOT NULL DEFAULT 1 CHECK (attempt > 0),
  idempotency_key text NOT NULL UNIQUE,
  stripe_customer_id text,
  subscription_id text UNIQUE,
  first_invoice_id text,
  current_period_end bigint,
  cancel_at_period_end boolean NOT NULL DEFAULT false,
  past_due_since bigint,
  -- door access suspended (the key revoked) after the plan's grace; restored with a fresh key when paid
  suspended boolean NOT NULL DEFAULT false,
  key_id text,
  key_seq int NOT NULL DEFAULT 0,
  -- the member's credential, as the digest the key carries (the clear value is in no row)
  credential_type text CHECK (credential_type IN ('pin', 'card')),
  credential_digest text,
  end_reason text CHECK (end_reason IN ('self_cancel', 'force_cancel', 'application_rejected', 'plan_retired', 'payment_failed_final')),
  ended_by text,
  end_note text,
  ended_at bigint,
  last_code text NOT NULL,
  cid text NOT NULL,
  created_at bigint NOT NULL,
  updated_at bigint NOT NULL,
  CHECK ((status IN ('ended', 'rejected')) = (ended_at IS NOT NULL)),
  CHECK (status NOT IN ('ending', 'ended', 'rejected') OR end_reason IS NOT NULL)
);
CREATE INDEX memberships_by_site ON memberships (site_id, created_at, id);
CREATE INDEX memberships_by_plan ON memberships (plan_id) WHERE status NOT IN ('ended', 'rejected');
CREATE INDEX memberships_past_due ON memberships (past_due_since) WHERE status = 'past_due' AND NOT suspended;

-- I4 for memberships: the status changes only inside a verb's transaction
-- (tobira.verb set), the version never shrinks, ended/rejected are final,
-- and every status that ends a membership (ending, ended, rejected) is
-- written by ONE verb: the transaction must have named endMembership
-- (set by the repository function endMembershipRow, nowhere else).
CREATE FUNCTION membership_status_guard() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  v_verb text := coalesce(current_setting('tobira.verb', true), '');
BEGIN
  IF v_verb = '' THEN
    RAISE EXCEPTION 'memberships.status may only change inside a verb (tobira.verb unset)' USING ERRCODE = 'P0001';
  END IF;
  IF TG_OP = 'INSERT' THEN
    IF NEW.status <> 'applied' THEN
      RAISE EXCEPTION 'a membership starts applied, not %', NEW.status USING ERRCODE = 'P0001';
    END IF;
    RETURN NEW;
  END IF;
  IF NEW.version < OLD.version THEN
    RAISE EXCEPTION 'memberships.version may not shrink' USING ERRCODE = 'P0001';
  END IF;
  IF OLD.status IN ('ended', 'rejected') AND NEW.status IS DISTINCT FROM OLD.status THEN
    RAISE EXCEPTION 'membership % is %: final', OLD.id, OLD.status USING ERRCODE = 'P0001';
  END IF;
  IF OLD.status = 'ending' AND NEW.status NOT IN ('ending', 'ended') THEN
    RAISE EXCEPTION 'membership % is ending: only endMembership may end it', OLD.id USING ERRCODE = 'P0001';
  END IF;
  IF NEW.status IS DISTINCT FROM OLD.status AND NEW.status IN ('ending', 'ended', 'rejected') AND v_verb <> 'endMembership' THEN
    RAISE EXCEPTION 'memberships.status % is written only by endMembership (tobira.verb = %)', NEW.status, v_verb USING ERRCODE = 'P0001';
  END IF;
  RETURN NEW;
END $$;
CREATE TRIGGER memberships_status_insert BEFORE INSERT ON memberships FOR EACH ROW EXECUTE FUNCTION membership_status_guard();
CREATE TRIGGER memberships_status_update BEFORE UPDATE ON memberships FOR EACH ROW
  WHEN (OLD.status IS DISTINCT FROM NEW.status OR OLD.version IS DISTINCT FROM NEW.version)
  EXECUTE FUNCTION membership_status_guard();

-- Webhooks-out membership.activated / membership.ended, in the transaction of
-- the status change (like 0017): once per change into the state.
ALTER TABLE webhook_endpoints DROP CONSTRAINT webhook_endpoints_events_check;
ALTER TABLE webhook_endpoints ADD CONSTRAINT webhook_endpoints_events_check
  CHECK (events <@ ARRAY['key.state_changed', 'access.event', 'alarm', 'downlink.dead_lettered',
                         'alarm.raised', 'gateway.offline', 'gateway.failing_closed',
                         'stay.confirmed', 'stay.cancelled', 'stay.expired', 'stay.failed', 'stay.checked_out',
                         'payment.succeeded', 'payment.refunded',
                         'membership.activated', 'membership.ended']::text[] AND cardinality(events) > 0);

CREATE FUNCTION webhook_on_membership_status() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM webhook_enqueue(
    NEW.site_id,
    CASE WHEN NEW.status = 'active' THEN 'membership.activated' ELSE 'membership.ended' END,
    jsonb_build_object('membershipId', NEW.id, 'siteId', NEW.site_id, 'planId', NEW.plan_id, 'personId', NEW.person_id,
                       'status', NEW.status, 'from', OLD.status, 'code', NEW.last_code, 'endReason', NEW.end_reason,
                       'keyId', NEW.key_id, 'version', NEW.version, 'at', NEW.updated_at),
    NEW.cid, NEW.updated_at);
  RETURN NULL;
END $$;
CREATE TRIGGER membership_status_webhooks AFTER UPDATE OF status ON memberships FOR EACH ROW
  WHEN (OLD.status IS DISTINCT FROM NEW.status
        AND ((NEW.status = 'active' AND OLD.status = 'applied') OR NEW.status IN ('ended', 'rejected')))
  EXECUTE FUNCTION webhook_on_membership_status();
