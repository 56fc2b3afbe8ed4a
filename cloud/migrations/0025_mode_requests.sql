-- 0025: operating modes set from the cloud (issue #17 part 3; docs/api.md "Modes", docs/cloud.md).
-- Forward-only.

-- The outbox carries a fourth sequenced type: site.mode (a site mode and/or passage schedules
-- for one gateway), next to the key types and 0023's keyset.update.

ALTER TABLE outbox DROP CONSTRAINT IF EXISTS outbox_type_check;
ALTER TABLE outbox ADD CONSTRAINT outbox_type_check CHECK (type IN ('key.grant', 'key.revoke', 'keyset.update', 'site.mode'));

-- One row per gateway a mode request went to. `request_id` is the admin call (one site or every
-- site in the caller's scope); its status is `pending` until every gateway acked its site.mode
-- (like a key's delivery status), then `applied` (or `refused` with the gateway's code).
CREATE TABLE mode_requests (
  request_id   text   NOT NULL,
  gateway_id   text   NOT NULL REFERENCES gateways(id),
  site_id      text   NOT NULL REFERENCES sites(id),
  mode         text   CHECK (mode IN ('normal', 'lockdown')),
  passage      jsonb  NOT NULL,
  requested_by text   NOT NULL,
  reason       text,
  jti          text   NOT NULL UNIQUE,
  seq          bigint NOT NULL,
  cid          text   NOT NULL,
  status       text   NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'applied', 'refused')),
  code         text,
  requested_at bigint NOT NULL,
  settled_at   bigint,
  PRIMARY KEY (request_id, gateway_id),
  CHECK ((status = 'pending') = (settled_at IS NULL))
);
CREATE INDEX mode_requests_site ON mode_requests (site_id, requested_at DESC);
