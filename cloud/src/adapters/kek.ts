import { createCipheriv, createDecipheriv, randomBytes } from 'node:crypto';
import { ConfigError, requireKeks, type CloudConfig } from '../config.js';

/**
 * Secrets at rest (docs/security.md "Secrets at rest"): every secret the cloud
 * must read back in clear (a gateway's credential pepper, a webhook signing
 * secret) is stored sealed with a key-encryption key (KEK) from the
 * environment (TOBIRA_KEK or the ring TOBIRA_KEKS), never in the database.
 * AES-256-GCM from node:crypto, a fresh 96-bit nonce per value. The sealed
 * text names its key id, so several KEKs can be loaded while a rotation
 * re-encrypts (`secrets rotate`); the additional authenticated data binds the
 * key id and the row and column (`gateways.credential_pepper:<id>`), so a
 * ciphertext copied to another row, or relabelled with another key id, does
 * not open.
 *
 * Text form: `kek1:<kid>:<nonce>:<ciphertext>:<tag>`, base64url parts.
 */
export interface SecretBox {
  /** The key new values are sealed with (the first of the ring). */
  readonly currentKid: string;
  /** Every key id this process can open, the current one first. */
  readonly kids: readonly string[];
  /** Where the ring came from, for the refusals that name the variable to fix. */
  readonly variable: 'TOBIRA_KEK' | 'TOBIRA_KEKS';
  seal(plaintext: string, aad: string): string;
  open(sealed: string, aad: string): OpenedSecret;
}

export type OpenedSecret =
  | { readonly ok: true; readonly value: string; readonly kid: string }
  /** KEK_UNKNOWN: sealed under a key id this process was not given; SECRET_UNREADABLE: malformed, tampered, moved to another row, or the key with its id is not the one that sealed it. */
  | { readonly ok: false; readonly code: 'KEK_UNKNOWN' | 'SECRET_UNREADABLE'; readonly kid: string | null };

/** A sealed value that did not open where it had to (a verb needing a pepper, a rotation). */
export class SecretUnreadable extends Error {
  constructor(
    readonly code: 'KEK_UNKNOWN' | 'SECRET_UNREADABLE',
    readonly where: string,
    readonly kid: string | null,
  ) {
    super(`${code}: the sealed secret of ${where} does not open with the loaded KEKs${kid === null ? '' : ` (kid ${kid})`}`);
    this.name = 'SecretUnreadable';
  }
}

const VERSION = 'kek1';
const SEALED = /^kek1:([A-Za-z0-9_-]{1,32}):([A-Za-z0-9_-]{16}):([A-Za-z0-9_-]*):([A-Za-z0-9_-]{22})$/;

/** The key id a sealed value names, or null when it is not a sealed value. */
export function kidOf(sealed: string): string | null {
  return SEALED.exec(sealed)?.[1] ?? null;
}

const header = (kid: string, aad: string): Buffer => Buffer.from(`${VERSION}\n${kid}\n${aad}`, 'utf8');

/** A box over the ring (the first key seals); keys are 32 raw bytes each. */
export function secretBox(
  ring: readonly { readonly kid: string; readonly key: Buffer }[],
  variable: SecretBox['variable'] = 'TOBIRA_KEKS',
): SecretBox {
  const first = ring[0];
  if (first === undefined) throw new ConfigError('KEK_REQUIRED', 'TOBIRA_KEK');
  const keys = new Map(ring.map((k) => [k.kid, k.key] as const));
  return {
    currentKid: first.kid,
    variable,
    kids: ring.map((k) => k.kid),
    seal(plaintext, aad) {
      const iv = randomBytes(12);
      const c = createCipheriv('aes-256-gcm', first.key, iv);
      c.setAAD(header(first.kid, aad));
      const data = Buffer.concat([c.update(plaintext, 'utf8'), c.final()]);
      return [VERSION, first.kid, iv.toString('base64url'), data.toString('base64url'), c.getAuthTag().toString('base64url')].join(':');
    },
    open(sealed, aad) {
      const m = SEALED.exec(sealed);
      if (m === null) return { ok: false, code: 'SECRET_UNREADABLE', kid: null };
      const [, kid = '', iv = '', data = '', tag = ''] = m;
      const key = keys.get(kid);
      if (key === undefined) return { ok: false, code: 'KEK_UNKNOWN', kid };
      try {
        const d = createDecipheriv('aes-256-gcm', key, Buffer.from(iv, 'base64url'));
        d.setAAD(header(kid, aad));
        d.setAuthTag(Buffer.from(tag, 'base64url'));
        const value = Buffer.concat([d.update(Buffer.from(data, 'base64url')), d.final()]).toString('utf8');
        return { ok: true, value, kid };
      } catch {
        return { ok: false, code: 'SECRET_UNREADABLE', kid };
      }
    },
  };
}

/** The box of the configured ring. Throws ConfigError KEK_REQUIRED when none is configured (there is no default KEK). */
export function loadSecretBox(config: Pick<CloudConfig, 'keks'>): SecretBox {
  const keks = requireKeks(config);
  return secretBox(
    keks.ring.map((k) => ({ kid: k.kid, key: Buffer.from(k.key, 'base64url') })),
    keks.variable,
  );
}
