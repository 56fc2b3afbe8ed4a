import {
  SignJWT,
  calculateJwkThumbprint,
  decodeJwt,
  decodeProtectedHeader,
  errors,
  exportJWK,
  generateKeyPair,
  importJWK,
  jwtVerify,
  type CryptoKey,
  type JWK,
} from 'jose';
import { z } from 'zod';
// jose encodes with Uint8Array.prototype.toBase64 when the runtime has it (Node 20: this module supplies it)
import './base64-polyfill.js';
import type { Clock } from './clock.js';
import type { VerifyCode } from './codes.js';
import { CorrelationId, MessageId, newMessageId } from './ids.js';
import {
  DownlinkMessage,
  MAX_MESSAGE_BYTES,
  UplinkEnvelope,
  checkUplinkBatch,
  type SignedMessage,
  type UplinkBatchMessage,
} from './messages.js';
import { decodeText, summarizeIssues } from './payload.js';

/**
 * Signed cloud <-> gateway messages: compact JWS, EdDSA over Ed25519, made and
 * checked with `jose`. The algorithm, `typ`, issuer and audience are fixed by
 * the verifier, never taken from the message; the key is looked up by `kid` in
 * a key set the verifier was given (never fetched on demand).
 */
export const JWS_ALG = 'EdDSA';
export const JWS_TYP = 'tobira-msg+jwt';
/** Default lifetime of a signed message. Long enough for a broker to hold it while a gateway reconnects. */
export const DEFAULT_TTL_SECONDS = 24 * 60 * 60;

export interface SigningKey {
  readonly kid: string;
  readonly privateKey: CryptoKey;
}

export interface KeyPairJwk {
  readonly kid: string;
  readonly privateJwk: JWK;
  readonly publicJwk: JWK;
}

export interface Jwks {
  readonly keys: readonly JWK[];
}

/** Makes a new Ed25519 key pair; its `kid` is the RFC 7638 thumbprint of the public key. */
export async function generateSigningKeyPair(): Promise<KeyPairJwk> {
  const { publicKey, privateKey } = await generateKeyPair(JWS_ALG, { crv: 'Ed25519', extractable: true });
  const publicJwk = await exportJWK(publicKey);
  const kid = await calculateJwkThumbprint(publicJwk);
  return {
    kid,
    publicJwk: { ...publicJwk, kid, alg: JWS_ALG, use: 'sig' },
    privateJwk: { ...(await exportJWK(privateKey)), kid, alg: JWS_ALG, use: 'sig' },
  };
}

export async function importSigningKey(privateJwk: JWK): Promise<SigningKey> {
  if (typeof privateJwk.kid !== 'string' || privateJwk.d === undefined) throw new TypeError('private JWK with a kid expected');
  return { kid: privateJwk.kid, privateKey: (await importJWK(privateJwk, JWS_ALG)) as CryptoKey };
}

/** A set of trusted public keys, by kid. */
export class KeySet {
  readonly #keys: ReadonlyMap<string, CryptoKey>;
  readonly #jwks: Jwks;
  private constructor(keys: Map<string, CryptoKey>, jwks: Jwks) {
    this.#keys = keys;
    this.#jwks = jwks;
  }
  static async fromJwks(jwks: Jwks): Promise<KeySet> {
    const keys = new Map<string, CryptoKey>();
    const kept: JWK[] = [];
    for (const jwk of jwks.keys) {
      if (typeof jwk.kid !== 'string' || jwk.kty !== 'OKP' || jwk.crv !== 'Ed25519')
        throw new TypeError('Ed25519 public JWK with a kid expected');
      const { d: _private, ...pub } = jwk;
      keys.set(jwk.kid, (await importJWK(pub, JWS_ALG)) as CryptoKey);
      kept.push(pub);
    }
    return new KeySet(keys, { keys: kept });
  }
  get(kid: string): CryptoKey | undefined {
    return this.#keys.get(kid);
  }
  get kids(): readonly string[] {
    return [...this.#keys.keys()];
  }
  /** The public JWKS, for publishing (keys rotate by adding a kid, then removing the old one). */
  toJwks(): Jwks {
    return this.#jwks;
  }
}

type Draft<M extends SignedMessage> = M extends unknown
  ? Omit<M, 'jti' | 'iss' | 'iat' | 'exp' | 'cid'> & { jti?: MessageId; cid: CorrelationId; ttlSeconds?: number }
  : never;

/**
 * Signs a message. `iss` is the signer's identity, `aud` the receiver's.
 * The draft is validated against the schema first: we never send what we would refuse.
 */
export async function signMessage<M extends SignedMessage>(
  key: SigningKey,
  issuer: string,
  draft: Draft<M>,
  clock: Clock,
): Promise<{ token: string; message: M }> {
  const iat = Math.floor(clock.now() / 1000);
  const { ttlSeconds = DEFAULT_TTL_SECONDS, jti = newMessageId(), ...rest } = draft as Draft<SignedMessage>;
  const claims = { ...rest, jti, iss: issuer, iat, exp: iat + ttlSeconds };
  const schema: z.ZodType = isDownlinkType(claims.type) ? DownlinkMessage : UplinkEnvelope;
  const checked = schema.safeParse(claims);
  if (!checked.success) throw new TypeError(`refusing to sign an invalid ${claims.type}: ${summarizeIssues(checked.error)}`);
  if (claims.type === 'uplink.batch') {
    const b = checkUplinkBatch(checked.data as UplinkBatchMessage);
    if (!b.ok) throw new TypeError(`refusing to sign an invalid uplink.batch: ${b.code} ${b.detail}`);
  }
  const token = await new SignJWT(claims as unknown as Record<string, unknown>)
    .setProtectedHeader({ alg: JWS_ALG, typ: JWS_TYP, kid: key.kid })
    .sign(key.privateKey);
  if (token.length > MAX_MESSAGE_BYTES) throw new RangeError(`signed ${claims.type} is ${token.length} bytes, over the 64 KiB limit`);
  return { token, message: checked.data as M };
}

const DOWNLINK_TYPES: ReadonlySet<string> = new Set(DownlinkMessage.options.map((o) => o.shape.type.value));
export const isDownlinkType = (type: string): boolean => DOWNLINK_TYPES.has(type);

export type VerifyResult<M> =
  | { readonly ok: true; readonly message: M; readonly kid: string }
  | { readonly ok: false; readonly code: VerifyCode; readonly detail: string };

export interface VerifyOptions<S extends z.ZodType> {
  readonly keys: KeySet;
  readonly issuer: string;
  readonly audience: string;
  readonly schema: S;
  readonly clock: Clock;
  /** Seconds of clock skew tolerated for `exp` and a future `iat` (default 60). */
  readonly clockToleranceSeconds?: number;
  /**
   * Accept any `iat` and `exp`: a verified, correctly addressed message is
   * never dropped for clock skew. For the cloud's uplink inbox,
   * which records the skew instead and refuses replays by its jti dedupe.
   */
  readonly anySkew?: boolean;
  /**
   * Accept an `iat` ahead of `clock` (`exp` is still checked). For a
   * receiver whose clock may lag the signer's and that takes the signer's
   * time as its floor: the gateway, whose trusted time after a power cut
   * with its clock reset resumes where it stopped, behind the cloud by the
   * outage, and only a verified cloud `iat` can bring it forward.
   */
  readonly futureIatOk?: boolean;
  /** Kids that were trusted once and are retired: refused as KID_RETIRED rather than UNKNOWN_KID (a retired key is never trusted again). */
  readonly retiredKids?: ReadonlySet<string>;
  /**
   * When each trusted kid starts to count (ms, judged on `clock`): a message
   * whose signature verifies under a kid before its time is refused
   * KID_NOT_YET_VALID. Absent for a kid: valid from the start.
   */
  readonly kidNotBefore?: ReadonlyMap<string, number>;
}

/** The tolerance `anySkew` stands for: finite (jose requires it), larger than any clock error. */
const ANY_SKEW_SECONDS = Math.floor(Number.MAX_SAFE_INTEGER / 1000);

const COMPACT_JWS = /^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*$/;
const fail = (code: VerifyCode, detail: string) => ({ ok: false, code, detail }) as const;

/**
 * Verifies a signed message and validates its claims against `schema`.
 * Order: size (before any parsing), encoding, header (alg, typ, kid), signature,
 * issuer/audience/expiry, schema. Never throws on bad input.
 */
export async function verifyMessage<S extends z.ZodType>(input: unknown, opts: VerifyOptions<S>): Promise<VerifyResult<z.infer<S>>> {
  const text = decodeText(input, MAX_MESSAGE_BYTES);
  if (!text.ok) return fail(text.code === 'TOO_LARGE' ? 'TOO_LARGE' : 'MALFORMED', text.detail);
  const token = text.value.trim();
  if (!COMPACT_JWS.test(token)) return fail('MALFORMED', 'not a compact JWS');
  // base64url is malleable in its padding bits; accept only the canonical
  // encoding of the signature so one signed message has exactly one token.
  const signature = token.slice(token.lastIndexOf('.') + 1);
  if (Buffer.from(signature, 'base64url').toString('base64url') !== signature) return fail('MALFORMED', 'non-canonical signature encoding');

  let header: ReturnType<typeof decodeProtectedHeader>;
  try {
    header = decodeProtectedHeader(token);
  } catch {
    return fail('MALFORMED', 'unreadable protected header');
  }
  if (header.alg !== JWS_ALG) return fail('ALG_NOT_ALLOWED', `alg ${String(header.alg)}`);
  if (header.typ !== JWS_TYP) return fail('WRONG_TYP', `typ ${String(header.typ)}`);
  if (typeof header.kid !== 'string') return fail('UNKNOWN_KID', 'no kid');
  if (opts.retiredKids?.has(header.kid) === true) return fail('KID_RETIRED', `kid ${header.kid.slice(0, 80)}`);
  const key = opts.keys.get(header.kid);
  if (key === undefined) return fail('UNKNOWN_KID', `kid ${header.kid.slice(0, 80)}`);

  const tolerance = opts.anySkew === true ? ANY_SKEW_SECONDS : (opts.clockToleranceSeconds ?? 60);
  let payload: unknown;
  try {
    ({ payload } = await jwtVerify(token, key, {
      algorithms: [JWS_ALG],
      typ: JWS_TYP,
      issuer: opts.issuer,
      audience: opts.audience,
      currentDate: new Date(opts.clock.now()),
      clockTolerance: tolerance,
      requiredClaims: ['jti', 'iat', 'exp'],
    }));
  } catch (e) {
    return mapJoseError(e);
  }
  // After the signature, so that only a message the key really signed is told apart from a forgery.
  const notBefore = opts.kidNotBefore?.get(header.kid);
  if (notBefore !== undefined && opts.clock.now() < notBefore)
    return fail('KID_NOT_YET_VALID', `kid ${header.kid.slice(0, 80)} counts from ${new Date(notBefore).toISOString()}`);
  const iat = (payload as { iat?: unknown }).iat;
  if (opts.futureIatOk !== true && typeof iat === 'number' && iat * 1000 > opts.clock.now() + tolerance * 1000) {
    return fail('NOT_YET_VALID', 'issued in the future');
  }
  const parsed = opts.schema.safeParse(payload);
  if (!parsed.success) return fail('SCHEMA_INVALID', summarizeIssues(parsed.error));
  return { ok: true, message: parsed.data, kid: header.kid };
}

function mapJoseError(e: unknown): { ok: false; code: VerifyCode; detail: string } {
  if (e instanceof errors.JWSSignatureVerificationFailed) return fail('BAD_SIGNATURE', 'signature does not verify');
  if (e instanceof errors.JWTExpired) return fail('EXPIRED', 'exp passed');
  if (e instanceof errors.JOSEAlgNotAllowed) return fail('ALG_NOT_ALLOWED', e.message);
  if (e instanceof errors.JWTClaimValidationFailed) {
    switch (e.claim) {
      case 'aud':
        return fail('WRONG_AUDIENCE', e.reason);
      case 'iss':
        return fail('WRONG_ISSUER', e.reason);
      case 'typ':
        return fail('WRONG_TYP', e.reason);
      case 'nbf':
      case 'iat':
        return e.reason === 'check_failed'
          ? fail('NOT_YET_VALID', `${e.claim} ${e.reason}`)
          : fail('SCHEMA_INVALID', `${e.claim} ${e.reason}`);
      default:
        return fail('SCHEMA_INVALID', `${e.claim} ${e.reason}`);
    }
  }
  if (e instanceof errors.JOSEError) return fail('MALFORMED', e.code);
  return fail('MALFORMED', 'unreadable token');
}

/**
 * What a message that did NOT verify says about itself, read without trusting
 * it (the payload segment is decoded, the signature is not checked), so a
 * refusal can be matched with the sender's records (outbox row, logs).
 * Anyone can write these values: they say where to look, never what happened.
 */
export interface UnverifiedClaims {
  readonly jti: string | null;
  readonly cid: string | null;
  readonly type: string | null;
  readonly seq: number | null;
  readonly iss: string | null;
}

export const NO_CLAIMS: UnverifiedClaims = Object.freeze({ jti: null, cid: null, type: null, seq: null, iss: null });

/**
 * The rule for each claim: kept only when it has the form the protocol gives
 * it (which also bounds its length), else null. Never truncated: a cut-off id
 * would look like a real one and match nothing, or the wrong thing.
 */
const CLAIM_TYPE = /^[A-Za-z0-9_.:-]{1,64}$/;
const CLAIM_ISSUER = /^[\x20-\x7e]{1,128}$/;
const claimOf = <T>(ok: boolean, v: T): T | null => (ok ? v : null);

/**
 * Reads the claimed `jti`, `cid`, `type`, `seq` and `iss` of a compact JWS
 * without verifying it. Oversize (> 64 KiB), non-UTF-8, non-JWS or
 * undecodable input gives `NO_CLAIMS`; each claim that is missing or not of
 * its protocol form (`jti` a UUID, `cid` 1-128 of [A-Za-z0-9_.:-], `type` 1-64
 * of the same, `seq` a non-negative safe integer, `iss` 1-128 printable ASCII)
 * is null. Never throws.
 */
export function readClaimsUnverified(input: unknown): UnverifiedClaims {
  const text = decodeText(input, MAX_MESSAGE_BYTES);
  if (!text.ok) return NO_CLAIMS;
  const token = text.value.trim();
  if (!COMPACT_JWS.test(token)) return NO_CLAIMS;
  let c: Record<string, unknown>;
  try {
    c = decodeJwt(token);
  } catch {
    return NO_CLAIMS;
  }
  const { jti, cid, type, seq, iss } = c;
  return {
    jti: claimOf(MessageId.safeParse(jti).success, jti as string),
    cid: claimOf(CorrelationId.safeParse(cid).success, cid as string),
    type: claimOf(typeof type === 'string' && CLAIM_TYPE.test(type), type as string),
    seq: claimOf(Number.isSafeInteger(seq) && (seq as number) >= 0, seq as number),
    iss: claimOf(typeof iss === 'string' && CLAIM_ISSUER.test(iss), iss as string),
  };
}

/**
 * The `body.requestId` and `iat` (ms) a `resync.answer` claims, read without
 * verifying it; null for anything else (another type, no UUID requestId, no
 * integer iat, undecodable). Lets a receiver tell whether a message it
 * refused answers a request of its own before judging it again. Never throws.
 */
export function readResyncAnswerUnverified(input: unknown): { readonly requestId: string; readonly iatMs: number } | null {
  const text = decodeText(input, MAX_MESSAGE_BYTES);
  if (!text.ok || !COMPACT_JWS.test(text.value.trim())) return null;
  let c: Record<string, unknown>;
  try {
    c = decodeJwt(text.value.trim());
  } catch {
    return null;
  }
  const claims = ResyncAnswerClaims.safeParse(c);
  return claims.success ? { requestId: claims.data.body.requestId, iatMs: claims.data.iat * 1000 } : null;
}

const ResyncAnswerClaims = z.object({
  type: z.literal('resync.answer'),
  iat: z.int().nonnegative(),
  body: z.object({ requestId: z.uuid() }),
});
