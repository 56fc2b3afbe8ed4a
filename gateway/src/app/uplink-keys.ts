import {
  generateUplinkKeyPairSync,
  importSigningKey,
  newId,
  signUplinkKeyProof,
  withCorrelation,
  type DownlinkMessage,
  type SigningKey,
} from '@tobira/shared';
import type { JWK } from 'jose';
import type { ReadableDb } from '../adapters/sqlite/db.js';
import { enqueue } from '../adapters/sqlite/outbox.js';
import {
  activeUplinkKey,
  discardProposedKeys,
  insertProposedKey,
  switchUplinkKey,
  uplinkKeyOfRotation,
} from '../adapters/sqlite/uplink-keys.js';
import type { AppContext } from './context.js';

/**
 * Rotation of this gateway's own uplink signing key
 * (docs/gateway.md "Uplink key rotation"), driven by the cloud: on
 * `uplink_key.rotate` a new Ed25519 pair is made and stored (or the one
 * already made for that rotation is kept: a restart or a replay never makes
 * a second), and an `uplink_key.proposal` is queued; it is signed at send
 * time with the key still active, so the cloud sees the old key vouch for
 * the new one. On `uplink_key.activate` the new key becomes the signer in the
 * inbox transaction, and the old private part is erased. Synchronous: both
 * run inside the inbox writer's transaction.
 */
type RotateMessage = Extract<DownlinkMessage, { type: 'uplink_key.rotate' }>;
type ActivateMessage = Extract<DownlinkMessage, { type: 'uplink_key.activate' }>;
export interface UplinkKeyResult {
  readonly result: 'applied' | 'noop' | 'refused';
  readonly code: 'UPLINK_KEY_PROPOSED' | 'UPLINK_KEY_ACTIVATED' | 'UPLINK_KEY_ALREADY_ACTIVE' | 'UPLINK_KEY_ROTATION_UNKNOWN';
}

export function applyUplinkKeyRotate(deps: AppContext, m: RotateMessage, now: number): UplinkKeyResult {
  const { db } = deps.store;
  const rotationId = m.body.rotationId;
  const log = withCorrelation(deps.log, m.cid, { jti: m.jti, seq: m.seq, rotationId });
  let key = uplinkKeyOfRotation(db, rotationId);
  if (key !== null && key.status !== 'proposed') {
    log.info({ code: 'UPLINK_KEY_ALREADY_ACTIVE', kid: key.kid, status: key.status }, 'uplink key rotation already done');
    return { result: 'noop', code: 'UPLINK_KEY_ALREADY_ACTIVE' };
  }
  if (key === null) {
    // a proposal the cloud no longer waits for (it asked again) is dropped with its private part
    const dropped = discardProposedKeys(db, now);
    const pair = generateUplinkKeyPairSync(`up-${newId()}`);
    insertProposedKey(db, { kid: pair.publicJwk.kid, privateJwk: pair.privateJwk as JWK, publicJwk: pair.publicJwk, rotationId }, now);
    key = uplinkKeyOfRotation(db, rotationId);
    if (key === null) throw new Error('proposed uplink key not read back');
    if (dropped > 0) log.warn({ dropped }, 'earlier proposed uplink keys dropped');
  }
  if (key.privateJwk === null) throw new Error('proposed uplink key without its private part');
  const proof = signUplinkKeyProof(key.privateJwk as never, deps.gatewayId, rotationId, key.kid);
  // essential: the cloud's rotation waits for it; it is signed by the active (old) key when sent
  const r = enqueue(db, deps.store.limits, 'uplink_key.proposal', { rotationId, publicJwk: key.publicJwk, proof }, m.cid, true, now);
  if ('refused' in r) throw new Error('essential outbox row refused');
  log.warn({ code: 'UPLINK_KEY_PROPOSED', kid: key.kid }, 'new uplink key proposed; signing with the current key until the cloud confirms');
  return { result: 'applied', code: 'UPLINK_KEY_PROPOSED' };
}

export function applyUplinkKeyActivate(deps: AppContext, m: ActivateMessage, now: number): UplinkKeyResult {
  const { db } = deps.store;
  const log = withCorrelation(deps.log, m.cid, { jti: m.jti, seq: m.seq, rotationId: m.body.rotationId, kid: m.body.kid });
  const key = uplinkKeyOfRotation(db, m.body.rotationId);
  if (key === null || key.kid !== m.body.kid) {
    log.warn({ code: 'UPLINK_KEY_ROTATION_UNKNOWN' }, 'uplink_key.activate for a key this gateway did not propose; refused');
    return { result: 'refused', code: 'UPLINK_KEY_ROTATION_UNKNOWN' };
  }
  if (key.status !== 'proposed') return { result: 'noop', code: 'UPLINK_KEY_ALREADY_ACTIVE' };
  const old = activeUplinkKey(db);
  switchUplinkKey(db, key.kid, now);
  log.warn({ code: 'UPLINK_KEY_ACTIVATED', oldKid: old?.kid ?? null }, 'uplinks are signed with the new key; the old one is erased');
  return { result: 'applied', code: 'UPLINK_KEY_ACTIVATED' };
}

/**
 * The key uplinks are signed with, read from `uplink_keys` and kept until the
 * inbox writer switches keys (`invalidate()`): a row is signed when it is
 * sent, so every row sent after the switch goes under the new key.
 */
export class UplinkKeyRing {
  #cached: Promise<SigningKey> | null = null;
  constructor(private readonly db: ReadableDb) {}

  current(): Promise<SigningKey> {
    this.#cached ??= (async () => {
      const k = activeUplinkKey(this.db);
      if (k?.privateJwk == null) throw new Error('no active uplink key');
      return importSigningKey(k.privateJwk);
    })();
    const p = this.#cached;
    p.catch(() => {
      if (this.#cached === p) this.#cached = null;
    });
    return p;
  }

  invalidate(): void {
    this.#cached = null;
  }
}
