import { createCipheriv, createDecipheriv, createHash, createHmac, randomBytes } from 'node:crypto';
import { z } from 'zod';

/**
 * The HTTP side of Idempotency-Key: the request's hash and the sealing of a
 * stored answer. The key's storage (claim, hold, complete, release) is
 * adapters/db/idempotency.ts; context.ts's `idempotent` runs a request between them.
 */

/** JSON with sorted object keys, so the same request hashes the same whatever the key order. */
export function canonicalJson(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(canonicalJson).join(',')}]`;
  if (v !== null && typeof v === 'object') {
    const o = v as Record<string, unknown>;
    return `{${Object.keys(o)
      .filter((k) => o[k] !== undefined)
      .sort()
      .map((k) => `${JSON.stringify(k)}:${canonicalJson(o[k])}`)
      .join(',')}}`;
  }
  return JSON.stringify(v) ?? 'null';
}

export const requestHash = (method: string, route: string, params: unknown, body: unknown, extra: unknown): string =>
  createHash('sha256').update(canonicalJson({ method, route, params, body, extra })).digest('hex');

/**
 * Stored answers are sealed (AES-256-GCM) under a key only the caller holds:
 * HMAC-SHA256(clear bearer token, Idempotency-Key). The database keeps the
 * token's hash, never the token, so whoever reads the database cannot open a
 * stored answer (a new API token, a gateway's pepper or broker password shown
 * once stay secret at rest), while the caller's replay, which presents the
 * token again, can.
 */
export const answerKey = (bearerToken: string, idempotencyKey: string): Buffer =>
  createHmac('sha256', bearerToken).update(`tobira-idempotent-answer\n${idempotencyKey}`).digest();

const Sealed = z.object({ v: z.literal(1), iv: z.string(), tag: z.string(), data: z.string() });
export type Sealed = z.infer<typeof Sealed>;

export function seal(key: Buffer, value: unknown): Sealed {
  const iv = randomBytes(12);
  const c = createCipheriv('aes-256-gcm', key, iv);
  const data = Buffer.concat([c.update(JSON.stringify(value), 'utf8'), c.final()]);
  return { v: 1, iv: iv.toString('base64url'), tag: c.getAuthTag().toString('base64url'), data: data.toString('base64url') };
}

/** The sealed value, or undefined when it is not a sealed answer or the key does not open it. */
export function unseal(key: Buffer, sealed: unknown): unknown {
  const parsed = Sealed.safeParse(sealed);
  if (!parsed.success) return undefined;
  const s = parsed.data;
  try {
    const d = createDecipheriv('aes-256-gcm', key, Buffer.from(s.iv, 'base64url'));
    d.setAuthTag(Buffer.from(s.tag, 'base64url'));
    const opened: unknown = JSON.parse(Buffer.concat([d.update(Buffer.from(s.data, 'base64url')), d.final()]).toString('utf8'));
    return opened;
  } catch {
    return undefined;
  }
}
