import { KeySet, importSigningKey, type Jwks, type SigningKey, type Logger } from '@tobira/shared';
import type { JWK } from 'jose';
import { parseSigningJwks, requireSigningJwk } from '../config.js';
import type { Queryable } from './db/db.js';
import { currentSigningKeys, registerLoadedKeys, type PublishedKey } from './db/signing-keys.js';

/**
 * The cloud's signing identity: the key that signs every downlink message and
 * the JWKS gateways trust. `key` and `jwks` are the current ones: after
 * `attach(db)` they follow the `signing_keys` table (signing-key rotation,
 * docs/operations.md), so every replica signs with the key the table names;
 * `refresh(db)` reads it again (the dispatcher does after each claim).
 */
export interface CloudSigner {
  readonly issuer: string;
  /** The key that signs now. */
  readonly key: SigningKey;
  /** The published public keys (published, signing, previous), with `kid`, `use`, `alg` and `nbf`/`retire_after` where known. */
  readonly jwks: Jwks;
  /** The private keys this process holds (CLOUD_SIGNING_JWK), by kid. */
  readonly loaded: ReadonlyMap<string, SigningKey>;
  /** Registers the loaded keys in the table (first start: the first signs, the others are published; later: new ones are staged), then reads it. */
  attach(db: Queryable, now: number): Promise<void>;
  /** Reads the signer and the published set from the table again. Never throws for a table naming a key this process lacks (logged; the last key stays). */
  refresh(db: Queryable): Promise<void>;
}

/**
 * Loads CLOUD_SIGNING_JWK (one private JWK or an array). There is no
 * generated fallback: a key made up at start differs per process and per
 * restart, so with two replicas, or after a restart, the gateways would
 * refuse every downlink (UNKNOWN_KID) and fail closed. Throws ConfigError
 * SIGNING_KEY_REQUIRED or SIGNING_KEY_INVALID. Before `attach` the first key
 * signs and all are published (a cloud with no database, tests); after it,
 * the table decides. Every message it signs names the signing key's `kid` in
 * its protected header (shared signMessage), so a gateway knows which of the
 * keys it trusts to check it with.
 */
export async function loadSigner(issuer: string, jwkJson: string | undefined, log: Logger): Promise<CloudSigner> {
  const privates = parseSigningJwks(requireSigningJwk({ signingJwk: jwkJson }));
  const loaded = new Map<string, SigningKey>();
  for (const p of privates) loaded.set(p.kid, await importSigningKey(p));
  const publics = privates.map(({ d: _d, ...pub }) => pub);
  let key = loaded.get(privates[0].kid) as SigningKey;
  let jwks = (await KeySet.fromJwks({ keys: publics })).toJwks();
  log.info({ kid: key.kid, loaded: [...loaded.keys()] }, 'cloud signing keys loaded');

  const refresh = async (db: Queryable): Promise<void> => {
    const { signingKid, published } = await currentSigningKeys(db);
    if (signingKid !== null && signingKid !== key.kid) {
      const next = loaded.get(signingKid);
      if (next === undefined) {
        // Another replica switched to a key this process was not given: keep signing with the last
        // one (still trusted by the gateways until it is retired) and say so loudly.
        log.error(
          { code: 'SIGNING_KEY_NOT_LOADED', kid: signingKid, signingWith: key.kid },
          'the table names a signing key this process does not hold',
        );
      } else {
        log.info({ kid: signingKid, was: key.kid }, 'cloud signing key switched');
        key = next;
      }
    }
    jwks = { keys: published.map(jwkOf) };
  };

  return {
    issuer,
    get key() {
      return key;
    },
    get jwks() {
      return jwks;
    },
    loaded,
    async attach(db, now) {
      await registerLoadedKeys(db, publics as PublishedKey['publicJwk'][], now);
      await refresh(db);
    },
    refresh,
  };
}

/** A published key as the JWKS shows it: the public JWK with `use`, `alg`, and the rotation times in seconds (`nbf`, `retire_after`). */
function jwkOf(k: PublishedKey): JWK {
  const { d: _never, ...pub } = k.publicJwk as JWK;
  return {
    ...pub,
    kid: k.kid,
    use: 'sig',
    alg: 'EdDSA',
    ...(k.notBefore !== null ? { nbf: Math.floor(k.notBefore / 1000) } : {}),
    ...(k.retireAfter !== null ? { retire_after: Math.floor(k.retireAfter / 1000) } : {}),
  } as JWK;
}

/** A signer that never follows a table (a cloud part run without one: tests of the inbox and the dispatcher). */
export function fixedSigner(issuer: string, key: SigningKey, jwks: Jwks): CloudSigner {
  return {
    issuer,
    key,
    jwks,
    loaded: new Map([[key.kid, key]]),
    attach: () => Promise.resolve(),
    refresh: () => Promise.resolve(),
  };
}
