-- The notification outbox (issue #13, docs/notifications.md): one row per
-- message to a guest or member, written by enqueueNotification in the
-- transaction of the business event, sent by the notification dispatcher
-- (claim with a lease -> send through the row's channel -> mark sent; on
-- failure back off, dead after N attempts with a visible code).

-- Where a person is told, and in which language. Null: not known (the
-- locale falls back to the site's, then to 'ja'; smtp needs an e-mail).
ALTER TABLE people ADD COLUMN locale text CHECK (locale IN ('ja', 'en'));
ALTER TABLE people ADD COLUMN email text CHECK (email ~ '^[^@\s]+@[^@\s]+$');
ALTER TABLE sites ADD COLUMN locale text CHECK (locale IN ('ja', 'en'));

CREATE TABLE notification_outbox (
  id bigserial PRIMARY KEY,
  -- the business event: `{template}:{subject}` (the same event never sends twice, even when its verb is retried)
  dedupe_key text NOT NULL UNIQUE,
  site_id text NOT NULL REFERENCES sites(id),
  person_id text NOT NULL REFERENCES people(id),
  channel text NOT NULL CHECK (channel IN ('log', 'webhook', 'smtp')),
  -- the recipient's address on that channel, resolved at enqueue (smtp: the e-mail; log/webhook: null)
  address text,
  -- resolved at enqueue: person -> site -> 'ja'
  locale text NOT NULL CHECK (locale IN ('ja', 'en')),
  template text NOT NULL,
  subject text NOT NULL,
  body text NOT NULL,
  status text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'sending', 'sent', 'dead')),
  attempts int NOT NULL DEFAULT 0 CHECK (attempts >= 0),
  next_attempt_at bigint NOT NULL,
  -- the claim: a fresh token per claim (a worker whose lease ran out marks nothing), who holds it, until when
  lease_token uuid,
  lease_until bigint,
  claimed_by text,
  -- `CODE: detail` of the last failed attempt; last_code is its code (what the API and the dead-letter list show)
  last_error text,
  last_code text GENERATED ALWAYS AS (substring(last_error FROM '^([A-Z][A-Z0-9_]*):')) STORED,
  cid text NOT NULL,
  created_at bigint NOT NULL,
  updated_at bigint NOT NULL,
  sent_at bigint,
  CHECK ((status = 'sending') = (lease_token IS NOT NULL)),
  CHECK ((status = 'sent') = (sent_at IS NOT NULL))
);
CREATE INDEX notification_outbox_due ON notification_outbox (next_attempt_at) WHERE status = 'pending';
CREATE INDEX notification_outbox_leased ON notification_outbox (lease_until) WHERE status = 'sending';
CREATE INDEX notification_outbox_list ON notification_outbox (site_id, created_at, id);
