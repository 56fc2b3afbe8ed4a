import { KeySet } from '@tobira/shared';
import type { ReadableDb } from '../adapters/sqlite/db.js';
import { loadTrustedKeys } from '../adapters/sqlite/trusted-keys.js';

/** The trusted set, the retired kids, and when each trusted kid starts to count (keys from the config: from the start). */
export interface TrustedRing {
  readonly keys: KeySet;
  readonly retired: ReadonlySet<string>;
  readonly notBefore: ReadonlyMap<string, number>;
}

/**
 * The cloud keys downlinks are verified with, read from `trusted_keys` and
 * kept until the inbox writer changes the table (a keyset.update), which
 * calls `invalidate()`. Verification then refuses a retired kid as
 * KID_RETIRED, an unknown one as UNKNOWN_KID, and a trusted one before its
 * notBefore (by the gateway's trusted time) as KID_NOT_YET_VALID.
 */
export class CloudKeyRing {
  #cached: Promise<TrustedRing> | null = null;
  /** The trusted set as last loaded, for synchronous checks (mobile tokens, inside a decision's transaction). */
  #last: KeySet | null = null;
  constructor(private readonly db: ReadableDb) {}

  /** The trusted keys as last loaded (null before the first load; `current()` at start loads them). */
  loaded(): KeySet | null {
    return this.#last;
  }

  current(): Promise<TrustedRing> {
    this.#cached ??= (async () => {
      const rows = loadTrustedKeys(this.db);
      const trusted = rows.flatMap((k) =>
        k.status === 'trusted' && k.jwk !== null ? [{ kty: k.jwk.kty, crv: k.jwk.crv, x: k.jwk.x, kid: k.jwk.kid }] : [],
      );
      const keys = await KeySet.fromJwks({ keys: trusted });
      this.#last = keys;
      return {
        keys,
        retired: new Set(rows.filter((k) => k.status === 'retired').map((k) => k.kid)),
        notBefore: new Map(rows.flatMap((k) => (k.status === 'trusted' && k.notBefore !== null ? [[k.kid, k.notBefore] as const] : []))),
      };
    })();
    return this.#cached;
  }

  /** The trusted set changed (a keyset.update applied): reloaded now, so `loaded()` follows at once. */
  invalidate(): void {
    this.#cached = null;
    this.current().catch(() => {
      this.#cached = null; // loaded again on the next use; a retired key stays out (the next load reads the table)
    });
  }
}
