import {
  newCorrelationId,
  newId,
  refused,
  verifyUplinkKeyProof,
  withCorrelation,
  type CorrelationId,
  type MessageOf,
  type Outcome,
  type UplinkMessage,
} from '@tobira/shared';
import { enterVerb, type Queryable } from '../adapters/db/db.js';
import { getGateway } from '../adapters/db/gateways.js';
import type { SiteScope } from '../adapters/db/scope.js';
import {
  installUplinkKey,
  insertRotation,
  listRotations,
  lockOpenRotation,
  lockRotation,
  retirePreviousUplinkKey,
  saveRotation,
  uplinkKeys,
  uplinkKidState,
  type UplinkKeyRotationRow,
} from '../adapters/db/uplink-keys.js';
import { enqueue } from '../adapters/outbox/enqueue.js';
import * as domain from '../domain/uplink-keys.js';
import type { AppDeps } from './deps.js';

/**
 * Rotation of a gateway's own uplink signing key
 * (docs/operations.md "Rotating a gateway's uplink key"), cloud-initiated:
 * `rotateUplinkKey` queues a sequenced `uplink_key.rotate`; the gateway's
 * `uplink_key.proposal`, signed with its current key and carrying a proof
 * made with the new one, is checked by `applyUplinkKeyProposal` inside the
 * uplink transaction, which makes the new key current and queues
 * `uplink_key.activate`; the first uplink verified under the new key retires
 * the old one (`noteUplinkKid`, same transaction as that uplink's effect).
 */
export interface UplinkKeyRotationView {
  readonly rotationId: string;
  readonly gatewayId: string;
  readonly status: domain.UplinkKeyRotationStatus;
  readonly oldKid: string;
  readonly newKid: string | null;
  readonly code: string | null;
  readonly requestedBy: string;
  readonly rotateSeq: number;
  readonly activateSeq: number | null;
  readonly requestedAt: number;
  readonly proposedAt: number | null;
  readonly settledAt: number | null;
}

const viewOf = (r: UplinkKeyRotationRow): UplinkKeyRotationView => ({
  rotationId: r.id,
  gatewayId: r.gatewayId,
  status: r.status,
  oldKid: r.oldKid,
  newKid: r.newKid,
  code: r.code,
  requestedBy: r.requestedBy,
  rotateSeq: r.rotateSeq,
  activateSeq: r.activateSeq,
  requestedAt: r.requestedAt,
  proposedAt: r.proposedAt,
  settledAt: r.settledAt,
});

export type RotateResult = Outcome<UplinkKeyRotationView, never> & { readonly cid: CorrelationId };

/**
 * The admin verb: one transaction writes the rotation (requested) and the
 * gateway's next sequenced downlink. A rotation already open answers
 * conflict UPLINK_KEY_ROTATION_IN_PROGRESS with that rotation.
 */
export async function rotateUplinkKey(
  deps: AppDeps,
  input: { gatewayId: string; scope: SiteScope; by: string; cid?: CorrelationId },
): Promise<RotateResult> {
  const cid = input.cid ?? newCorrelationId();
  const log = withCorrelation(deps.log, cid, { verb: 'rotateUplinkKey', gatewayId: input.gatewayId });
  const o = await deps.db.transaction(async (tx): Promise<Outcome<UplinkKeyRotationView, never>> => {
    if ((await getGateway(tx, input.scope, input.gatewayId)) === null) return refused('GATEWAY_NOT_FOUND');
    await enterVerb(tx, 'rotateUplinkKey');
    const open = await lockOpenRotation(tx, input.gatewayId);
    const d = domain.requestRotation(open);
    if (d.status !== 'applied') {
      if (open === null) throw new Error('conflict without an open rotation');
      return { status: 'conflict', code: d.code, current: viewOf(open) };
    }
    const current = (await uplinkKeys(tx, input.gatewayId)).find((k) => k.status === 'current');
    if (current === undefined) throw new Error(`gateway ${input.gatewayId} has no current uplink key`);
    const now = deps.clock.now();
    const id = newId();
    const e = await enqueue(
      tx,
      { gatewayId: input.gatewayId, type: 'uplink_key.rotate', keyId: null, keyVersion: null, body: { rotationId: id }, cid },
      now,
    );
    await insertRotation(tx, {
      id,
      gatewayId: input.gatewayId,
      oldKid: current.kid,
      requestedBy: input.by,
      cid,
      jti: e.jti,
      seq: e.seq,
      now,
    });
    const r = await lockRotation(tx, input.gatewayId, id);
    if (r === null) throw new Error('rotation not read back');
    return { status: 'applied', code: d.code, state: viewOf(r), emits: [] };
  });
  if (o.status === 'applied') {
    deps.wake();
    log.warn({ code: o.code, rotationId: o.state.rotationId, oldKid: o.state.oldKid }, 'uplink key rotation requested');
  } else log.info({ code: o.code }, 'uplink key rotation not requested');
  return { ...o, cid };
}

/** The gateway's rotations, newest first (null: no such gateway in scope). */
export async function listUplinkKeyRotations(deps: AppDeps, gatewayId: string, scope: SiteScope): Promise<UplinkKeyRotationView[] | null> {
  if ((await getGateway(deps.db, scope, gatewayId)) === null) return null;
  return (await listRotations(deps.db, gatewayId)).map(viewOf);
}

export type ProposalResult = { result: 'applied' | 'noop' | 'refused'; code: string; queued: boolean };

/**
 * Inside the uplink transaction of a verified `uplink_key.proposal`
 * (`signedKid`: the key the message verified with). Applied: the new key is
 * current, the old one `previous` (still accepted), the rotation `proposed`,
 * and `uplink_key.activate` queued. A bad new-key proof or a kid used before
 * fails the rotation (refused); anything else is refused and changes nothing.
 */
export async function applyUplinkKeyProposal(
  tx: Queryable,
  gatewayId: string,
  m: MessageOf<UplinkMessage, 'uplink_key.proposal'>,
  signedKid: string,
  now: number,
): Promise<ProposalResult> {
  const b = m.body;
  await enterVerb(tx, 'applyUplinkKeyProposal');
  const r = await lockRotation(tx, gatewayId, b.rotationId);
  const keys = await uplinkKeys(tx, gatewayId);
  const current = keys.find((k) => k.status === 'current');
  if (current === undefined) throw new Error(`gateway ${gatewayId} has no current uplink key`);
  const o = domain.acceptProposal(r, {
    signedKid,
    currentKid: current.kid,
    newKid: b.publicJwk.kid,
    proofOk: verifyUplinkKeyProof(b.publicJwk, b.proof, gatewayId, b.rotationId),
    kidTaken: keys.some((k) => k.kid === b.publicJwk.kid),
  });
  if (o.status === 'noop') return { result: 'noop', code: o.code, queued: false };
  if (o.status !== 'applied' || r === null) return { result: 'refused', code: o.code, queued: false };
  if (o.state.status === 'failed') {
    if ((await saveRotation(tx, o.state, 'requested', { now })) !== 1) throw new Error('rotation changed under its lock');
    return { result: 'refused', code: o.code, queued: false };
  }
  await installUplinkKey(tx, gatewayId, b.publicJwk, r.id, now);
  const e = await enqueue(
    tx,
    { gatewayId, type: 'uplink_key.activate', keyId: null, keyVersion: null, body: { rotationId: r.id, kid: b.publicJwk.kid }, cid: m.cid },
    now,
  );
  if ((await saveRotation(tx, o.state, 'requested', { activateJti: e.jti, activateSeq: e.seq, now })) !== 1)
    throw new Error('rotation changed under its lock');
  return { result: 'applied', code: o.code, queued: true };
}

export type KidCheck = { ok: true; retired: string | null } | { ok: false; code: 'KID_RETIRED' | 'UNKNOWN_KID' };

/**
 * Inside every uplink transaction, before the message's effect: the key it
 * verified with must still be accepted (a replica's cached keys may be older
 * than the table). A message under the current key while a `previous` one
 * waits retires that one and activates its rotation: from then on the old
 * kid is refused KID_RETIRED.
 */
export async function noteUplinkKid(tx: Queryable, gatewayId: string, kid: string, now: number): Promise<KidCheck> {
  const s = await uplinkKidState(tx, gatewayId, kid);
  if (s.status === 'retired') return { ok: false, code: 'KID_RETIRED' };
  if (s.status === null) return { ok: false, code: 'UNKNOWN_KID' };
  if (s.status !== 'current' || s.previousKid === null) return { ok: true, retired: null };
  await enterVerb(tx, 'activateUplinkKey');
  const open = await lockOpenRotation(tx, gatewayId);
  const retired = await retirePreviousUplinkKey(tx, gatewayId, now);
  if (open !== null) {
    const o = domain.activateOnUse(open, kid);
    if (o.status === 'applied' && (await saveRotation(tx, o.state, 'proposed', { now })) !== 1)
      throw new Error('rotation changed under its lock');
  }
  return { ok: true, retired };
}
