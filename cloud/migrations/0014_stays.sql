-- Stays paid through Stripe (issue #12; docs/payments.md). Rooms and their
-- doors, per-site stay settings, stays with one row per reserved night,
-- the payments ledger, refunds, the Stripe webhook inbox and the billing
-- job queue. Times are bigint epoch ms from the application clock; money is
-- bigint in the currency's minor unit; stay dates are site-local dates.

-- A room is a named set of doors at a site that one stay books for its nights.
CREATE TABLE rooms (
  id text PRIMARY KEY,
  site_id text NOT NULL REFERENCES sites(id),
  name text NOT NULL,
  created_at bigint NOT NULL,
  UNIQUE (site_id, name)
);
CREATE TABLE room_doors (
  room_id text NOT NULL REFERENCES rooms(id) ON DELETE CASCADE,
  door_id text NOT NULL REFERENCES doors(id),
  PRIMARY KEY (room_id, door_id)
);

-- A site without a row uses the defaults below (the same as defaultStaySettings()).
CREATE TABLE site_stay_settings (
  site_id text PRIMARY KEY REFERENCES sites(id),
  hold_minutes int NOT NULL DEFAULT 30 CHECK (hold_minutes BETWEEN 1 AND 1440),
  check_in_time text NOT NULL DEFAULT '15:00' CHECK (check_in_time ~ '^([01][0-9]|2[0-3]):[0-5][0-9]$'),
  check_out_time text NOT NULL DEFAULT '10:00' CHECK (check_out_time ~ '^([01][0-9]|2[0-3]):[0-5][0-9]$'),
  -- CancellationPolicy (cloud/src/domain/cancellation-policy.ts); validated by validatePolicy before it is written
  cancellation_policy jsonb NOT NULL
    DEFAULT '{"tiers":[{"minDaysBefore":7,"refundPercent":100},{"minDaysBefore":2,"refundPercent":50}],"noShowRefundPercent":0}'::jsonb,
  currency text NOT NULL DEFAULT 'jpy' CHECK (currency ~ '^[a-z]{3}$'),
  max_nights int NOT NULL DEFAULT 30 CHECK (max_nights BETWEEN 1 AND 366),
  updated_at bigint NOT NULL
);
-- Doors every stay at the site opens besides its room's (lobby, gate).
CREATE TABLE stay_shared_doors (
  site_id text NOT NULL REFERENCES sites(id),
  door_id text NOT NULL REFERENCES doors(id),
  PRIMARY KEY (site_id, door_id)
);

CREATE TABLE stays (
  id text PRIMARY KEY,
  site_id text NOT NULL REFERENCES sites(id),
  room_id text NOT NULL REFERENCES rooms(id),
  person_id text NOT NULL REFERENCES people(id),
  check_in date NOT NULL,
  check_out date NOT NULL,
  amount bigint NOT NULL CHECK (amount > 0),
  currency text NOT NULL CHECK (currency ~ '^[a-z]{3}$'),
  deposit bigint NOT NULL DEFAULT 0 CHECK (deposit >= 0 AND deposit <= amount),
  status text NOT NULL CHECK (status IN ('pending', 'confirmed', 'checked_in', 'checked_out', 'failed', 'expired', 'cancelled')),
  -- compare-and-set counter, grows on every write
  version int NOT NULL CHECK (version > 0),
  hold_until bigint NOT NULL,
  -- set at confirm; the key row itself is written later by the issue_stay_key job, so no foreign key
  key_id text,
  cancel_reason text CHECK (cancel_reason IN ('guest_cancelled', 'staff_cancelled', 'no_show', 'payment_disputed', 'site_closed')),
  last_code text NOT NULL,
  cid text NOT NULL,
  created_at bigint NOT NULL,
  updated_at bigint NOT NULL,
  CHECK (check_in < check_out),
  CHECK ((status = 'cancelled') = (cancel_reason IS NOT NULL))
);
-- the hold sweeper's scan, and "pending past its hold plus slack" alarms
CREATE INDEX stays_pending_hold ON stays (hold_until) WHERE status = 'pending';
CREATE INDEX stays_by_site ON stays (site_id, created_at, id);

-- One row per reserved night. The primary key IS the no-double-booking rule:
-- two stays cannot hold one room for one night, whatever races (PGlite has
-- no btree_gist, so no exclusion constraint on a range). A stay releases its
-- nights by deleting them in the transaction of its status change.
CREATE TABLE stay_nights (
  room_id text NOT NULL REFERENCES rooms(id),
  night date NOT NULL,
  stay_id text NOT NULL REFERENCES stays(id),
  PRIMARY KEY (room_id, night)
);
CREATE INDEX stay_nights_by_stay ON stay_nights (stay_id);

-- I4 for stays and payments: status (and version) change only inside a
-- verb's transaction, which sets tobira.verb (set_config(..., true)).
CREATE FUNCTION billing_status_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF coalesce(current_setting('tobira.verb', true), '') = '' THEN
    RAISE EXCEPTION '%.status may only change inside a verb (tobira.verb unset)', TG_TABLE_NAME USING ERRCODE = 'P0001';
  END IF;
  IF TG_OP = 'UPDATE' AND NEW.version < OLD.version THEN
    RAISE EXCEPTION '%.version may not shrink', TG_TABLE_NAME USING ERRCODE = 'P0001';
  END IF;
  RETURN NEW;
END $$;
CREATE TRIGGER stays_status_insert BEFORE INSERT ON stays FOR EACH ROW EXECUTE FUNCTION billing_status_guard();
CREATE TRIGGER stays_status_update BEFORE UPDATE ON stays FOR EACH ROW
  WHEN (OLD.status IS DISTINCT FROM NEW.status OR OLD.version IS DISTINCT FROM NEW.version)
  EXECUTE FUNCTION billing_status_guard();

-- A stay that no longer holds its room must have released every night by
-- the end of its transaction (checked at commit, so the order of the status
-- update and the delete inside the transaction does not matter).
CREATE FUNCTION stay_nights_released() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.status NOT IN ('pending', 'confirmed', 'checked_in') AND EXISTS (SELECT 1 FROM stay_nights WHERE stay_id = NEW.id) THEN
    RAISE EXCEPTION 'stay % is % but still holds nights', NEW.id, NEW.status USING ERRCODE = 'P0001';
  END IF;
  RETURN NULL;
END $$;
CREATE CONSTRAINT TRIGGER stays_release_nights AFTER UPDATE OF status ON stays
  DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION stay_nights_released();

-- The payments ledger: one row per (stay, purpose), written with its
-- idempotency key BEFORE the first Stripe call, so a retry after a crash
-- asks Stripe with the same key and gets the same PaymentIntent.
CREATE TABLE payments (
  id text PRIMARY KEY,
  stay_id text NOT NULL REFERENCES stays(id),
  purpose text NOT NULL CHECK (purpose IN ('stay_balance', 'stay_deposit')),
  amount bigint NOT NULL CHECK (amount > 0),
  currency text NOT NULL CHECK (currency ~ '^[a-z]{3}$'),
  status text NOT NULL CHECK (status IN ('requires_payment', 'processing', 'succeeded', 'failed', 'refund_pending', 'refunded', 'partially_refunded')),
  version int NOT NULL CHECK (version > 0),
  attempt int NOT NULL CHECK (attempt > 0),
  -- purpose:subjectId:attempt
  idempotency_key text NOT NULL UNIQUE,
  intent_id text UNIQUE,
  client_secret text,
  amount_received bigint NOT NULL DEFAULT 0 CHECK (amount_received >= 0),
  amount_refunded bigint NOT NULL DEFAULT 0 CHECK (amount_refunded >= 0 AND amount_refunded <= amount_received),
  last_code text NOT NULL,
  cid text NOT NULL,
  created_at bigint NOT NULL,
  updated_at bigint NOT NULL,
  UNIQUE (stay_id, purpose)
);
CREATE TRIGGER payments_status_insert BEFORE INSERT ON payments FOR EACH ROW EXECUTE FUNCTION billing_status_guard();
CREATE TRIGGER payments_status_update BEFORE UPDATE ON payments FOR EACH ROW
  WHEN (OLD.status IS DISTINCT FROM NEW.status OR OLD.version IS DISTINCT FROM NEW.version)
  EXECUTE FUNCTION billing_status_guard();

-- A refund, with its idempotency key stored before the first call; the call
-- itself is a billing job (kind 'refund'), so a crash between the Stripe
-- call and the local write retries with the same key and Stripe answers
-- with the refund it already made.
CREATE TABLE refunds (
  id text PRIMARY KEY,
  payment_id text NOT NULL REFERENCES payments(id),
  amount bigint NOT NULL CHECK (amount > 0),
  currency text NOT NULL CHECK (currency ~ '^[a-z]{3}$'),
  status text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'succeeded', 'failed')),
  idempotency_key text NOT NULL UNIQUE,
  stripe_refund_id text UNIQUE,
  -- for the operator's view; retries and leases are the billing job's
  attempts int NOT NULL DEFAULT 0,
  last_error text,
  cid text NOT NULL,
  created_at bigint NOT NULL,
  updated_at bigint NOT NULL,
  CHECK ((status = 'succeeded') <= (stripe_refund_id IS NOT NULL))
);
CREATE INDEX refunds_by_payment ON refunds (payment_id);

-- The Stripe webhook inbox: stored (verified) in the request's transaction,
-- answered 200, processed by the worker. The event id is the dedupe key;
-- received and processed are kept apart; a permanent failure is dead with a code.
CREATE TABLE payment_webhook_events (
  event_id text PRIMARY KEY,
  type text NOT NULL,
  object_id text,
  payload jsonb NOT NULL,
  cid text NOT NULL,
  received_at bigint NOT NULL,
  status text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'processing', 'processed', 'dead')),
  processed_at bigint,
  attempts int NOT NULL DEFAULT 0,
  next_attempt_at bigint NOT NULL,
  lease_token uuid,
  lease_until bigint,
  last_error text,
  dead_code text,
  CHECK ((status = 'processing') = (lease_token IS NOT NULL)),
  CHECK ((status = 'processed') = (processed_at IS NOT NULL)),
  CHECK ((status = 'dead') = (dead_code IS NOT NULL))
);
CREATE INDEX payment_webhook_events_due ON payment_webhook_events (next_attempt_at) WHERE status = 'pending';
CREATE INDEX payment_webhook_events_leased ON payment_webhook_events (lease_until) WHERE status = 'processing';
CREATE INDEX payment_webhook_events_dead ON payment_webhook_events (received_at) WHERE status = 'dead';

-- The billing outbox: effects the stay and payment verbs emit, written in
-- the verb's transaction, run by a worker with claim lease + capped backoff
-- (like `outbox`, but with no gateway and no seq: these have no order).
-- dedupe_key makes the enqueue idempotent: one job per effect, ever.
CREATE TABLE billing_jobs (
  id bigserial PRIMARY KEY,
  kind text NOT NULL CHECK (kind IN ('create_intent', 'cancel_intent', 'refund', 'issue_stay_key', 'notify')),
  subject_id text NOT NULL,
  dedupe_key text NOT NULL UNIQUE,
  body jsonb NOT NULL,
  cid text NOT NULL,
  status text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'running', 'done', 'dead')),
  attempts int NOT NULL DEFAULT 0,
  next_attempt_at bigint NOT NULL,
  lease_token uuid,
  lease_until bigint,
  last_error text,
  last_code text,
  created_at bigint NOT NULL,
  done_at bigint,
  CHECK ((status = 'running') = (lease_token IS NOT NULL))
);
CREATE INDEX billing_jobs_due ON billing_jobs (next_attempt_at) WHERE status = 'pending';
CREATE INDEX billing_jobs_leased ON billing_jobs (lease_until) WHERE status = 'running';
CREATE INDEX billing_jobs_dead ON billing_jobs (created_at) WHERE status = 'dead';
