import {
  MOBILE_TOKEN_DEFAULT_TTL_SECONDS,
  newCorrelationId,
  newId,
  signMobileToken,
  withCorrelation,
  type CorrelationId,
  type OutcomeCode,
} from '@tobira/shared';
import { getKeySummary } from '../adapters/db/keys.js';
import type { SiteScope } from '../adapters/db/scope.js';
import type { CloudSigner } from '../adapters/signer.js';
import { mobileTokenRefusal } from '../domain/mobile-tokens.js';
import type { AppDeps } from './deps.js';

export interface MobileTokenInput {
  readonly keyId: string;
  /** Seconds the token lives (default 300, at most 3600); never past the key's validUntil. */
  readonly ttlSeconds?: number;
  /** The caller's sites: a key at a gateway outside them is not found. Absent or null: every site. */
  readonly siteScope?: SiteScope;
  readonly cid?: CorrelationId;
}

export type MobileTokenResult =
  | {
      readonly status: 'applied';
      readonly code: 'MOBILE_TOKEN_ISSUED';
      readonly cid: CorrelationId;
      readonly token: string;
      readonly keyId: string;
      readonly personId: string;
      readonly gatewayId: string;
      readonly expiresAt: number;
      readonly kid: string;
    }
  | { readonly status: 'refused'; readonly code: OutcomeCode; readonly detail?: string; readonly cid: CorrelationId };

const refusedWith = (code: OutcomeCode, cid: CorrelationId): MobileTokenResult => ({ status: 'refused', code, cid });

/**
 * Issues a short-lived mobile token for a person's phone: signed with the
 * cloud's signing key, bound to the key id, its person and its gateway (the
 * audience). Nothing is written (a token is not state: it expires; revoking
 * the key makes its tokens useless at the door, since the gateway decides
 * for the key). The token is never logged.
 */
export async function issueMobileToken(deps: AppDeps, signer: CloudSigner, input: MobileTokenInput): Promise<MobileTokenResult> {
  const cid = input.cid ?? newCorrelationId();
  const log = withCorrelation(deps.log, cid, { keyId: input.keyId });
  const key = await getKeySummary(deps.db, input.siteScope ?? null, input.keyId);
  if (key === null) return refusedWith('KEY_NOT_FOUND', cid);
  const now = deps.clock.now();
  const refusal = mobileTokenRefusal(key, now);
  if (refusal !== null) {
    log.info({ code: refusal, status: key.status, credentialType: key.credentialType }, 'mobile token refused');
    return refusedWith(refusal, cid);
  }
  const { token, claims } = await signMobileToken(
    signer.key,
    signer.issuer,
    {
      gatewayId: key.gatewayId,
      keyId: key.id,
      personId: key.personId,
      jti: newId(),
      ttlSeconds: input.ttlSeconds ?? MOBILE_TOKEN_DEFAULT_TTL_SECONDS,
      notAfter: key.validUntil,
    },
    deps.clock,
  );
  log.info({ code: 'MOBILE_TOKEN_ISSUED', jti: claims.jti, exp: claims.exp, gatewayId: key.gatewayId }, 'mobile token issued');
  return {
    status: 'applied',
    code: 'MOBILE_TOKEN_ISSUED',
    cid,
    token,
    keyId: key.id,
    personId: key.personId,
    gatewayId: key.gatewayId,
    expiresAt: claims.exp * 1000,
    kid: signer.key.kid,
  };
}
