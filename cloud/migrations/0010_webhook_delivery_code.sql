-- Each delivery attempt gets a stable code next to its free-text error, so
-- operators and tools can match on it (docs/api.md "Webhooks"): NULL when
-- delivered, otherwise one of WEBHOOK_HTTP_STATUS, WEBHOOK_REDIRECT_NOT_FOLLOWED,
-- WEBHOOK_ADDRESS_FORBIDDEN, WEBHOOK_TIMEOUT, WEBHOOK_CONNECTION_FAILED.
ALTER TABLE webhook_deliveries ADD COLUMN code text;
