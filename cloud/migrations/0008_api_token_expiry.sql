-- API token lifetime and rotation (docs/api.md "Token lifetime and rotation").
--
-- expires_at: NULL = never expires (the bootstrap token, or TOBIRA_API_TOKEN_TTL_DAYS=0);
--   a token is refused (401 TOKEN_EXPIRED) from expires_at on.
-- rotated_to: the successor made by POST /api-tokens/{id}/rotate, set on the OLD row
--   in the same statement that inserts the new one, so "rotate once" is a
--   compare-and-set on this row (rotated_to IS NULL). UNIQUE: a token is the
--   successor of at most one token.
-- last_used_at: the last authenticated request, written at most once a minute per token.
ALTER TABLE api_tokens ADD COLUMN expires_at bigint;
ALTER TABLE api_tokens ADD COLUMN rotated_to text UNIQUE REFERENCES api_tokens(id);
ALTER TABLE api_tokens ADD COLUMN last_used_at bigint;
ALTER TABLE api_tokens ADD CONSTRAINT api_tokens_not_own_successor CHECK (rotated_to <> id);
