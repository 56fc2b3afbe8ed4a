import { expiresSoon } from '../domain/tokens.js';

/**
 * The HTTP side of API tokens: the route flag of self-service routes and the
 * expiry warning header. The rules are domain/tokens.ts's, the storage
 * adapters/db/tokens.ts's; app.ts's authenticate hook joins them.
 */

declare module 'fastify' {
  interface FastifyContextConfig {
    /**
     * Any role may call this write route on its own token (auditors too); the
     * handler enforces "self or admin". Token rotation only.
     */
    selfService?: boolean;
  }
}

/** Set on a response to a token that expires within EXPIRY_WARNING_MS (domain/tokens.ts). */
export const TOKEN_EXPIRES_HEADER = 'tobira-token-expires-at';

/** The `Tobira-Token-Expires-At` value (ISO 8601) when the token expires soon, else undefined. */
export const expiryWarning = (expiresAt: number | null, now: number): string | undefined =>
  expiresSoon(expiresAt, now) ? new Date(expiresAt).toISOString() : undefined;
