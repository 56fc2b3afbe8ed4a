-- Two money gaps of the commerce (docs/payments.md, docs/notifications.md,
-- docs/memberships.md).
--
-- A stay booked without a credential gets a PIN the cloud draws at
-- confirmation. The guest's key notice carries it: the rendered body keeps a
-- {{pin}} placeholder and the PIN waits in `secret` only until the row is
-- delivered; the dispatcher fills it in at send time and clears it with the
-- mark. A delivered row never holds it (the CHECK below), and no read of the
-- admin API selects the column.
ALTER TABLE notification_outbox ADD COLUMN secret text;
ALTER TABLE notification_outbox ADD CONSTRAINT notification_outbox_secret_until_sent CHECK (status <> 'sent' OR secret IS NULL);

-- An application approved by staff whose first invoice is never paid ends at
-- its checkout deadline: rejected with the end reason 'checkout_expired'.
ALTER TABLE memberships DROP CONSTRAINT memberships_end_reason_check;
ALTER TABLE memberships ADD CONSTRAINT memberships_end_reason_check
  CHECK (end_reason IN ('self_cancel', 'force_cancel', 'application_rejected', 'plan_retired', 'payment_failed_final',
                        'checkout_expired'));

-- Its money, if any landed anyway (paid in the moment before the cancellation),
-- is refunded in full by a billing job of its own.
ALTER TABLE billing_jobs DROP CONSTRAINT billing_jobs_kind_check;
ALTER TABLE billing_jobs ADD CONSTRAINT billing_jobs_kind_check
  CHECK (kind IN ('create_intent', 'cancel_intent', 'refund', 'issue_stay_key', 'notify', 'walk_in_refund', 'reconcile_membership',
                  'membership_refund'));
