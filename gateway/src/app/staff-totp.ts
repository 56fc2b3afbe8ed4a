import { createCipheriv, createDecipheriv, createHash, hkdfSync, randomBytes, randomInt } from 'node:crypto';
import { generateSecret, generateURI, verifySync } from 'otplib';
import QRCode from 'qrcode';

/**
 * The pieces of the supervisors' TOTP second factor (docs/gateway.md "Second
 * factor (TOTP)") that hold no state: codes are made and checked by otplib
 * (RFC 6238: SHA-1, 6 digits, 30 s, the parameters every authenticator app
 * reads from an `otpauth://` URI), the QR code's modules by `qrcode`.
 *
 * - The secret at rest is sealed with AES-256-GCM under a key derived (HKDF)
 *   from the config's credentialPepper, the gateway's one secret kept outside
 *   its database, with the account id as associated data: the database file
 *   alone gives no secret, and a box moved to another account does not open.
 * - Recovery codes: 10 of 10 Crockford base32 characters (50 random bits),
 *   kept as their SHA-256 (like the setup code: random enough that a fast
 *   hash is enough).
 */

export const TOTP_POLICIES = ['required', 'optional', 'off'] as const;
export type TotpPolicy = (typeof TOTP_POLICIES)[number];

/** One 30 s step either side of now: an authenticator a little off the gateway's clock still works. */
export const DRIFT_STEPS = 1;
const PERIOD_S = 30;
export const RECOVERY_CODE_COUNT = 10;
const CROCKFORD = '0123456789ABCDEFGHJKMNPQRSTVWXYZ';

export const sealKeyOf = (pepper: Uint8Array): Buffer =>
  Buffer.from(hkdfSync('sha256', pepper, Buffer.alloc(0), 'tobira-gateway staff totp secret v1', 32));

/** `v1.<iv>.<ciphertext>.<tag>`, base64url. */
export function sealSecret(key: Buffer, accountId: string, secret: string): string {
  const iv = randomBytes(12);
  const c = createCipheriv('aes-256-gcm', key, iv);
  c.setAAD(Buffer.from(accountId, 'utf8'));
  const ct = Buffer.concat([c.update(secret, 'utf8'), c.final()]);
  return ['v1', iv, ct, c.getAuthTag()].map((p) => (typeof p === 'string' ? p : p.toString('base64url'))).join('.');
}

/** The secret, or null when the box does not open (another pepper, another account, tampered). */
export function openSecret(key: Buffer, accountId: string, box: string): string | null {
  const [v, iv, ct, tag] = box.split('.');
  if (v !== 'v1' || iv === undefined || ct === undefined || tag === undefined) return null;
  try {
    const d = createDecipheriv('aes-256-gcm', key, Buffer.from(iv, 'base64url'));
    d.setAAD(Buffer.from(accountId, 'utf8'));
    d.setAuthTag(Buffer.from(tag, 'base64url'));
    return Buffer.concat([d.update(Buffer.from(ct, 'base64url')), d.final()]).toString('utf8');
  } catch {
    return null;
  }
}

export const newTotpSecret = (): string => generateSecret({ length: 20 });

export const totpUri = (issuer: string, label: string, secret: string): string => generateURI({ issuer, label, secret });

/**
 * The URI as a QR code: its modules, one string of `1` (dark) and `0` per
 * row. The page draws them on a canvas: its Content-Security-Policy loads
 * images from the gateway only (no data: URL), and the secret never goes
 * into a URL a browser could cache or log.
 */
export interface QrModules {
  readonly size: number;
  readonly rows: readonly string[];
}
export function qrModules(uri: string): QrModules {
  const m = QRCode.create(uri, { errorCorrectionLevel: 'M' }).modules;
  const rows: string[] = [];
  for (let r = 0; r < m.size; r++) rows.push(Array.from(m.data.subarray(r * m.size, (r + 1) * m.size), (b) => (b ? '1' : '0')).join(''));
  return { size: m.size, rows };
}

/** The time step a typed code belongs to (within the drift window), or null when it is no current code. */
export function stepOfCode(secret: string, typed: string, nowMs: number): number | null {
  const token = typed.replace(/\s/g, '');
  if (!/^\d{6}$/.test(token)) return null;
  const r = verifySync({ secret, token, epoch: Math.floor(nowMs / 1000), epochTolerance: DRIFT_STEPS * PERIOD_S });
  return r.valid && 'timeStep' in r ? r.timeStep : null;
}

export function newRecoveryCodes(): string[] {
  const codes: string[] = [];
  for (let n = 0; n < RECOVERY_CODE_COUNT; n++) {
    let s = '';
    for (let i = 0; i < 10; i++) s += CROCKFORD[randomInt(32)];
    codes.push(`${s.slice(0, 5)}-${s.slice(5)}`);
  }
  return codes;
}

/** As typed: case, spaces and dashes do not matter; I, L → 1, O → 0 (Crockford). */
export const recoveryCodeHash = (typed: string): string =>
  createHash('sha256').update(typed.toUpperCase().replace(/[\s-]/g, '').replace(/[IL]/g, '1').replace(/O/g, '0')).digest('hex');
