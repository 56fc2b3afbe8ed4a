-- Check-in gates, walk-ins and monthly quotas (issue #13, docs/memberships.md
-- "Check-in gates"). Times are bigint epoch ms; money bigint minor units;
-- months are the site's own calendar month 'YYYY-MM'.

-- The site lets its front desk sell walk-in day passes (off unless set: fail closed).
ALTER TABLE site_stay_settings ADD COLUMN walk_ins_allowed boolean NOT NULL DEFAULT false;

-- The price of a walk-in day pass of a plan; null: the plan is not sold at the desk.
ALTER TABLE plans ADD COLUMN walk_in_amount bigint CHECK (walk_in_amount > 0);

-- A person the site refuses at check-in (GUEST_BLOCKED). One row per site and person.
CREATE TABLE blocked_people (
  site_id text NOT NULL REFERENCES sites(id),
  person_id text NOT NULL REFERENCES people(id),
  reason text NOT NULL CHECK (length(reason) BETWEEN 1 AND 1000),
  blocked_by text NOT NULL,
  blocked_at bigint NOT NULL,
  PRIMARY KEY (site_id, person_id)
);

-- Uses of a plan's monthly quota by a person, per calendar month of the
-- site. The CHECKs are the invariant (0 <= used <= quota) whatever races;
-- the use and the return are single-statement compare-and-set updates
-- (adapters/db/walk-ins.ts), so a lost race is 0 rows, never a wrong count.
CREATE TABLE quota_usage (
  plan_id text NOT NULL REFERENCES plans(id),
  person_id text NOT NULL REFERENCES people(id),
  month text NOT NULL CHECK (month ~ '^[0-9]{4}-(0[1-9]|1[0-2])$'),
  quota int NOT NULL CHECK (quota >= 0),
  used int NOT NULL CHECK (used >= 0),
  updated_at bigint NOT NULL,
  PRIMARY KEY (plan_id, person_id, month),
  CHECK (used <= quota)
);

-- A walk-in day pass sold at the front desk: pays through the intent factory
-- (metadata.purpose = walk_in, the idempotency key stored in this row before
-- the call), its key issued through the key verb once the payment settled.
CREATE TABLE walk_ins (
  id text PRIMARY KEY,
  site_id text NOT NULL REFERENCES sites(id),
  plan_id text NOT NULL REFERENCES plans(id),
  person_id text NOT NULL REFERENCES people(id),
  -- the site-local date of the pass (its key runs to the end of that day)
  day date NOT NULL,
  -- the month the use counts against (the month of `day`); null when the plan has no quota
  quota_month text CHECK (quota_month ~ '^[0-9]{4}-(0[1-9]|1[0-2])$'),
  quota_returned boolean NOT NULL DEFAULT false,
  status text NOT NULL CHECK (status IN ('pending', 'paid', 'failed', 'expired', 'cancelled')),
  version int NOT NULL CHECK (version > 0),
  amount bigint NOT NULL CHECK (amount > 0),
  currency text NOT NULL CHECK (currency ~ '^[a-z]{3}$'),
  -- walk_in:<id>:1, stored before the first Stripe call
  idempotency_key text NOT NULL UNIQUE,
  intent_id text UNIQUE,
  client_secret text,
  amount_received bigint NOT NULL DEFAULT 0 CHECK (amount_received >= 0),
  hold_until bigint NOT NULL,
  key_id text,
  credential_type text NOT NULL CHECK (credential_type IN ('pin', 'card')),
  credential_digest text NOT NULL,
  cancel_reason text,
  last_code text NOT NULL,
  cid text NOT NULL,
  created_at bigint NOT NULL,
  updated_at bigint NOT NULL,
  CHECK ((status = 'cancelled') = (cancel_reason IS NOT NULL)),
  CHECK ((status = 'paid' OR status = 'cancelled') <= (key_id IS NOT NULL)),
  CHECK (NOT quota_returned OR quota_month IS NOT NULL)
);
CREATE INDEX walk_ins_pending_hold ON walk_ins (hold_until) WHERE status = 'pending';
CREATE INDEX walk_ins_by_site ON walk_ins (site_id, created_at, id);
CREATE TRIGGER walk_ins_status_insert BEFORE INSERT ON walk_ins FOR EACH ROW EXECUTE FUNCTION billing_status_guard();
CREATE TRIGGER walk_ins_status_update BEFORE UPDATE ON walk_ins FOR EACH ROW
  WHEN (OLD.status IS DISTINCT FROM NEW.status OR OLD.version IS DISTINCT FROM NEW.version)
  EXECUTE FUNCTION billing_status_guard();

-- A stay booked under a membership (a members' booking): ending the
-- membership cancels it through the stay verb (reason membership_ended).
ALTER TABLE stays ADD COLUMN membership_id text REFERENCES memberships(id);
CREATE INDEX stays_by_membership ON stays (membership_id) WHERE membership_id IS NOT NULL AND status = 'confirmed';
ALTER TABLE stays DROP CONSTRAINT stays_cancel_reason_check;
ALTER TABLE stays ADD CONSTRAINT stays_cancel_reason_check
  CHECK (cancel_reason IN ('guest_cancelled', 'staff_cancelled', 'no_show', 'payment_disputed', 'site_closed', 'membership_ended'));
