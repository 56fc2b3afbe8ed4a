-- A walk-in's refunds as Stripe holds them (docs/payments.md "Walk-ins"):
-- the desk's own refund is pending until Stripe says it succeeded, and may
-- fail; a refund made in Stripe directly (the dashboard, support) is recorded
-- from Stripe's own object, one row per Stripe refund, its status following
-- Stripe's.
ALTER TABLE walk_in_refunds DROP CONSTRAINT walk_in_refunds_status_check;
ALTER TABLE walk_in_refunds ADD CONSTRAINT walk_in_refunds_status_check CHECK (status IN ('pending', 'succeeded', 'failed'));

CREATE TABLE walk_in_stripe_refunds (
  stripe_refund_id text PRIMARY KEY,
  walk_in_id text NOT NULL REFERENCES walk_ins(id),
  amount bigint NOT NULL CHECK (amount > 0),
  currency text NOT NULL CHECK (currency ~ '^[a-z]{3}$'),
  status text NOT NULL CHECK (status IN ('pending', 'succeeded', 'failed')),
  cid text NOT NULL,
  created_at bigint NOT NULL,
  updated_at bigint NOT NULL
);
CREATE INDEX walk_in_stripe_refunds_walk_in ON walk_in_stripe_refunds (walk_in_id);
