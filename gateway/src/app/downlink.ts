import {
  DownlinkMessage,
  KeySet,
  newCorrelationId,
  readClaimsUnverified,
  readResyncAnswerUnverified,
  verifyMessage,
  withCorrelation,
  type Clock,
} from '@tobira/shared';
import type { CloudKeyRing } from './trusted-keys.js';
import { recordRejected } from '../adapters/sqlite/diagnostics.js';
import { insertInbox } from '../adapters/sqlite/inbox.js';
import { nowOf, type AppContext } from './context.js';

/**
 * Receiving one downlink message: size, signature, issuer, audience, expiry
 * and schema are checked by `verifyMessage` (in that order, size first); a
 * refused message is counted, logged and recorded in `rejected`, and never
 * applied. What a refused message claims about itself (jti, cid, type, seq,
 * iss) is read without trusting it and recorded as "claimed" so an operator
 * can find the cloud's side of it; nothing is decided on it. A verified
 * message is inserted into the inbox (unique jti). The caller acks the broker
 * only after this returns, i.e. after the commit.
 */
export interface DownlinkDeps extends AppContext {
  /** The trusted cloud keys: the gateway's `trusted_keys` (a fixed KeySet in tests that need no rotation). */
  readonly cloudKeys: KeySet | CloudKeyRing;
  readonly cloudIssuer: string;
  readonly applySoon: () => void;
}

export type DownlinkResult =
  { readonly kind: 'stored' | 'duplicate'; readonly jti: string } | { readonly kind: 'rejected'; readonly code: string };

export async function receiveDownlink(deps: DownlinkDeps, topic: string, payload: Uint8Array): Promise<DownlinkResult> {
  const clock = { now: () => nowOf(deps) };
  const ring =
    deps.cloudKeys instanceof KeySet
      ? { keys: deps.cloudKeys, retired: new Set<string>(), notBefore: new Map<string, number>() }
      : await deps.cloudKeys.current();
  const verify = (at: Clock) =>
    verifyMessage(payload, {
      keys: ring.keys,
      retiredKids: ring.retired,
      // judged on the gateway's trusted time (clock above), never on the message's own iat
      kidNotBefore: ring.notBefore,
      issuer: deps.cloudIssuer,
      audience: deps.gatewayId,
      schema: DownlinkMessage,
      clock: at,
      // The cloud's iat is the reference: trusted time that lags it (a restart after a power cut with the
      // clock reset resumes at the persisted floor) is raised to it when the message is stored. Refusing it
      // as "issued in the future" would fail the site closed until someone set the clock.
      futureIatOk: true,
    });
  let v = await verify(clock);
  if (!v.ok && v.code === 'EXPIRED') {
    // A start with the wall clock more than a message's lifetime ahead leaves trusted time (the
    // persisted high-water mark) past the exp of everything the cloud signs, the proof of the time
    // included, and the site would fail closed for good. The answer to a request this process sent
    // moments ago is fresh by that request (its random id, our monotonic clock), not by its exp: it
    // is judged as of its own signing time, and its proof then brings trusted time back (context.ts).
    const own = readResyncAnswerUnverified(payload);
    if (own !== null && deps.time.awaits(own.requestId)) {
      const again = await verify({ now: () => own.iatMs });
      if (again.ok) {
        withCorrelation(deps.log, again.message.cid).warn(
          { code: 'TIME_AHEAD_OF_CLOUD', trustedMs: clock.now(), cloudIatMs: own.iatMs },
          "the answer to our resync is expired against this gateway's trusted time, which a clock ahead pushed forward: accepted as fresh by its request",
        );
        v = again;
      }
    }
  }
  if (!v.ok) {
    deps.metrics.rejected.inc({ code: v.code });
    const claimed = readClaimsUnverified(payload);
    recordRejected(
      deps.store.db,
      deps.store.retention.rejectedMaxRows,
      { topic, code: v.code, detail: v.detail, bytes: payload.byteLength, claimed },
      clock.now(),
    );
    // The claimed cid is logged as the line's cid so the refusal sits next to the cloud's lines of
    // that work; it is unverified (anyone can publish here), so `cidClaimed` says so. No cid of the
    // right form: the rejection is its own unit of work.
    withCorrelation(deps.log, claimed.cid ?? newCorrelationId(), { cidClaimed: claimed.cid !== null }).warn(
      { code: v.code, detail: v.detail, bytes: payload.byteLength, claimed },
      'downlink message rejected',
    );
    return { kind: 'rejected', code: v.code };
  }
  const m = v.message;
  const log = withCorrelation(deps.log, m.cid, { jti: m.jti, type: m.type, seq: 'seq' in m ? m.seq : null });
  const inserted = insertInbox(deps.store.db, m, clock.now(), v.kid);
  if (inserted === 'duplicate') {
    log.info('duplicate downlink message: acked, not applied again');
    return { kind: 'duplicate', jti: m.jti };
  }
  log.debug('downlink message stored in inbox');
  deps.crash('afterInboxInsertBeforeApply');
  deps.applySoon();
  return { kind: 'stored', jti: m.jti };
}
