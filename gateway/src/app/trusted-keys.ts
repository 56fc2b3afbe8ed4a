import { KeySet } from '@tobira/shared';
import type { ReadableDb } from '../adapters/sqlite/db.js';
import { loadTrustedKeys } from '../adapters/sqlite/trusted-keys.js';

/**
 * The cloud keys downlinks are verified with, read from `trusted_keys` and
 * kept until the inbox writer changes the table (a keyset.update), which
 * calls `invalidate()`. Verification then refuses a retired kid as
 * KID_RETIRED and an unknown one as UNKNOWN_KID.
 */
export class CloudKeyRing {
  #cached: Promise<{ keys: KeySet; retired: ReadonlySet<string> }> | null = null;
  constructor(private readonly db: ReadableDb) {}

  current(): Promise<{ keys: KeySet; retired: ReadonlySet<string> }> {
    this.#cached ??= (async () => {
      const rows = loadTrustedKeys(this.db);
      const trusted = rows.flatMap((k) =>
        k.status === 'trusted' && k.jwk !== null ? [{ kty: k.jwk.kty, crv: k.jwk.crv, x: k.jwk.x, kid: k.jwk.kid }] : [],
      );
      return {
        keys: await KeySet.fromJwks({ keys: trusted }),
        retired: new Set(rows.filter((k) => k.status === 'retired').map((k) => k.kid)),
      };
    })();
    return this.#cached;
  }

  invalidate(): void {
    this.#cached = null;
  }
}
