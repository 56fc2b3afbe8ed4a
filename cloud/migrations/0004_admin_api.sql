-- Admin HTTP API: API tokens, idempotency keys, and the sites a person was
-- created for (people are global in the core; the API scopes them by site).

CREATE TABLE api_tokens (
  id text PRIMARY KEY,
  name text NOT NULL,
  role text NOT NULL CHECK (role IN ('admin', 'manager', 'auditor')),
  -- NULL = every site (admin only); otherwise the sites the token may see
  sites text[],
  -- hex SHA-256 of the clear token; the clear token is shown once at creation
  token_hash text NOT NULL UNIQUE CHECK (token_hash ~ '^[0-9a-f]{64}$'),
  created_at bigint NOT NULL,
  revoked_at bigint,
  CHECK (sites IS NOT NULL OR role = 'admin')
);

-- One row per (token, Idempotency-Key): in_progress while the first request
-- runs (locked_until bounds a crashed holder), done with the stored response.
CREATE TABLE idempotency_keys (
  token_id text NOT NULL REFERENCES api_tokens(id),
  key text NOT NULL,
  request_hash text NOT NULL,
  state text NOT NULL CHECK (state IN ('in_progress', 'done')),
  locked_until bigint NOT NULL,
  status_code int,
  response jsonb,
  created_at bigint NOT NULL,
  PRIMARY KEY (token_id, key),
  CHECK ((state = 'done') = (status_code IS NOT NULL))
);
CREATE INDEX idempotency_keys_created ON idempotency_keys (created_at);

CREATE TABLE api_person_sites (
  person_id text NOT NULL REFERENCES people(id),
  site_id text NOT NULL REFERENCES sites(id),
  PRIMARY KEY (person_id, site_id)
);
