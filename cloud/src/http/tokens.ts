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
    /**
     * An admin token limited to some sites may call this admin route (API
     * tokens): the handler keeps it to tokens of its own sites. Every other
     * admin route acts on every site (signing keys, sites, billing retries,
     * metrics) and needs an admin of every site.
     */
    scopedAdmin?: boolean;
  }
}

/** True when every site of a token (null: every site) is among the caller's (null: every site). */
export const withinSites = (tokenSites: readonly string[] | null, callerSites: readonly string[] | null): boolean =>
  callerSites === null || (tokenSites !== null && tokenSites.every((s) => callerSites.includes(s)));

/** Set on a response to a token that expires within EXPIRY_WARNING_MS (domain/tokens.ts). */
export const TOKEN_EXPIRES_HEADER = 'tobira-token-expires-at';

/** The `Tobira-Token-Expires-At` value (ISO 8601) when the token expires soon, else undefined. */
export const expiryWarning = (expiresAt: number | null, now: number): string | undefined =>
  expiresSoon(expiresAt, now) ? new Date(expiresAt).toISOString() : undefined;
