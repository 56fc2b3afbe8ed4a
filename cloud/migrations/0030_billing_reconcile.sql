-- Billing that converges with Stripe whatever Stripe answered (docs/memberships.md,
-- docs/payments.md; DESIGN.md §2 I3, I8).
--
-- A membership's billing stop whose outcome at Stripe is unknown (the call timed
-- out, its connection was lost, Stripe answered 500) is recorded as pending, never
-- as "nothing changed": the stop it asked for, until a `reconcile_membership` job
-- has read the subscription from Stripe and the membership followed it. Every
-- write of an end (endMembershipRow) clears it.
ALTER TABLE memberships
  ADD COLUMN billing_stop_pending text CHECK (billing_stop_pending IN ('cancel_now', 'cancel_at_period_end'));

ALTER TABLE billing_jobs DROP CONSTRAINT billing_jobs_kind_check;
ALTER TABLE billing_jobs ADD CONSTRAINT billing_jobs_kind_check
  CHECK (kind IN ('create_intent', 'cancel_intent', 'refund', 'issue_stay_key', 'notify', 'walk_in_refund', 'reconcile_membership'));

-- Refunds from any source: one made in Stripe directly (the dashboard, support) is
-- recorded from Stripe's refund object with source 'stripe' and the key
-- 'stripe:<refund id>' (it had none of ours). Ours keep 'refund:<paymentId>:<attempt>'.
ALTER TABLE refunds ADD COLUMN source text NOT NULL DEFAULT 'tobira' CHECK (source IN ('tobira', 'stripe'));

-- A stay whose money was all refunded in Stripe (the dashboard, support) ends:
-- cancelled with reason 'payment_refunded', its key revoked.
ALTER TABLE stays DROP CONSTRAINT stays_cancel_reason_check;
ALTER TABLE stays ADD CONSTRAINT stays_cancel_reason_check
  CHECK (cancel_reason IN ('guest_cancelled', 'staff_cancelled', 'no_show', 'payment_disputed', 'site_closed', 'membership_ended',
                           'guest_blocked', 'payment_refunded'));
