import {
  newId,
  newMessageId,
  signMessage,
  topics,
  withCorrelation,
  MAX_MESSAGE_BYTES,
  type DownlinkMessage,
  type KeyGrant,
  type MessageOf,
  type UplinkMessage,
} from '@tobira/shared';
import type { MqttLink } from '../adapters/mqtt/link.js';
import { signRow } from '../adapters/outbox/dispatcher.js';
import type { CloudSigner } from '../adapters/signer.js';
import { setRepeatableRead } from '../adapters/db/db.js';
import { bumpSeqPast, lastSeqOf } from '../adapters/db/gateways.js';
import { grantNames, keysForSnapshot } from '../adapters/db/keys.js';
import { outboxRowsBetween } from '../adapters/db/outbox-reads.js';
import { modesForSnapshot, recordSnapshotSent, trustedKeysForSnapshot } from '../adapters/db/snapshots.js';
import { toGrant } from '../domain/keys.js';
import type { AppDeps } from './deps.js';

type ResyncRequest = MessageOf<UplinkMessage, 'resync.request'>;
type AnswerBody = MessageOf<DownlinkMessage, 'resync.answer'>['body'];
type SnapshotBody = MessageOf<DownlinkMessage, 'keyset.snapshot'>['body'];

/** Raw JSON budget of one snapshot part: base64url grows it by 4/3, and the signed token must stay under 64 KiB. */
export const SNAPSHOT_PART_BUDGET = Math.floor((MAX_MESSAGE_BYTES * 3) / 4) - 4096;

export interface ResyncDeps {
  readonly link: MqttLink;
  readonly signer: CloudSigner;
  readonly replayMax: number;
  readonly publishTimeoutMs: number;
}

/** Splits a key set into snapshot parts whose bodies stay within the size budget and the schema's item limits. */
export function chunkSnapshot<T extends { keyId: string; version: number }>(
  keys: readonly KeyGrant[],
  revoked: readonly T[],
  budget = SNAPSHOT_PART_BUDGET,
) {
  const parts: { keys: KeyGrant[]; revoked: T[] }[] = [];
  let cur: (typeof parts)[number] = { keys: [], revoked: [] };
  let size = 0;
  const push = () => {
    parts.push(cur);
    cur = { keys: [], revoked: [] };
    size = 0;
  };
  for (const k of keys) {
    const n = JSON.stringify(k).length + 1;
    if (cur.keys.length > 0 && (size + n > budget || cur.keys.length >= 1000)) push();
    cur.keys.push(k);
    size += n;
  }
  for (const t of revoked) {
    const n = JSON.stringify(t).length + 1;
    if ((cur.keys.length > 0 || cur.revoked.length > 0) && (size + n > budget || cur.revoked.length >= 5000)) push();
    cur.revoked.push(t);
    size += n;
  }
  if (cur.keys.length > 0 || cur.revoked.length > 0 || parts.length === 0) push();
  return parts;
}

/**
 * Answers a gateway's resync request (docs/architecture.md): `up_to_date`
 * when it has everything; `replay` of the missing sequenced messages (same
 * jti and seq, freshly signed) when the gap is short and every row is still
 * in the outbox; otherwise a `keyset.snapshot` of the gateway's whole current
 * key set, in parts, as of the last seq assigned.
 */
export async function answerResync(app: AppDeps, r: ResyncDeps, gatewayId: string, req: ResyncRequest): Promise<AnswerBody['mode']> {
  const cid = req.cid;
  const log = withCorrelation(app.log, cid, { gatewayId, requestId: req.body.requestId });
  const from = req.body.lastAppliedSeq;
  const publish = async (token: string) => r.link.publish(topics.gatewayDown(gatewayId), token, r.publishTimeoutMs);
  const answer = async (body: AnswerBody) =>
    publish(
      (
        await signMessage<MessageOf<DownlinkMessage, 'resync.answer'>>(
          r.signer.key,
          r.signer.issuer,
          { type: 'resync.answer', aud: gatewayId, cid, body },
          app.clock,
        )
      ).token,
    );

  const lastSeq = await lastSeqOf(app.db, gatewayId);
  if (from > lastSeq || req.body.reason === 'conflict') {
    // The gateway applied seqs this database never handed out, or it was sent a seq it had
    // already used: this database was restored to an earlier point. Seqs must never be handed
    // out twice, so the counter moves past both histories (committed before the snapshot is
    // read), and the snapshot as of that seq replaces the gateway's key set with this database's.
    const newLastSeq = await bumpSeqPast(app.db, gatewayId, from);
    log.error(
      { code: 'GATEWAY_SEQ_CONFLICT', reason: req.body.reason, gatewayAppliedSeq: from, cloudLastSeq: lastSeq, newLastSeq },
      "the gateway's history differs from this database's (restored from a backup?): seq moved past both, snapshot follows; changes made after the backup are not in it and must be made again",
    );
  } else if (from === lastSeq) {
    await answer({ requestId: req.body.requestId, mode: 'up_to_date', fromSeq: from, toSeq: lastSeq, snapshotId: null });
    log.info({ lastSeq }, 'resync: up to date');
    return 'up_to_date';
  }
  if (from < lastSeq && lastSeq - from <= r.replayMax && req.body.reason !== 'conflict') {
    const rows = await outboxRowsBetween(app.db, gatewayId, from, lastSeq);
    await r.signer.refresh(app.db); // after the rows: never older than what they were queued under
    // sign everything first: a row that cannot be signed (a poison row) makes it a snapshot instead
    const tokens =
      rows.length === lastSeq - from
        ? await Promise.all(rows.map((row) => signRow(r.signer, { ...row, gatewayId }, app.clock).catch(() => null)))
        : [];
    if (tokens.length > 0 && tokens.every((x) => x !== null)) {
      await answer({ requestId: req.body.requestId, mode: 'replay', fromSeq: from + 1, toSeq: lastSeq, snapshotId: null });
      for (const token of tokens) await r.link.publish(topics.gatewayDown(gatewayId), token as string, r.publishTimeoutMs);
      log.info({ fromSeq: from + 1, toSeq: lastSeq }, 'resync: replayed');
      return 'replay';
    }
  }
  // Snapshot: one consistent read of the counter and the key set.
  // With it, the trusted cloud keys and the modes as of the same seq: the gateway skips the
  // keyset.update and site.mode rows the snapshot covers, so the snapshot carries their effect.
  const snap = await app.db.transaction(async (tx) => {
    await setRepeatableRead(tx);
    const asOfSeq = await lastSeqOf(tx, gatewayId);
    return {
      asOfSeq,
      keys: await keysForSnapshot(tx, gatewayId),
      trustedKeys: await trustedKeysForSnapshot(tx),
      modes: await modesForSnapshot(tx, gatewayId, asOfSeq),
    };
  });
  await r.signer.refresh(app.db);
  const live = snap.keys.filter((k) => k.status === 'issuing' || k.status === 'active');
  const names = await grantNames(app.db, live);
  const grants = live.map((k) => toGrant(k, names));
  // a used one-time key is a tombstone too: a gateway restored from before its entry must not hold it live
  const tombstones = snap.keys
    .filter((k) => k.status === 'revoking' || k.status === 'revoked' || k.status === 'used')
    .map((k) => ({ keyId: k.id, version: k.version }));
  const extras = {
    ...(snap.trustedKeys !== null ? { trustedKeys: snap.trustedKeys } : {}),
    ...(snap.modes !== null ? { modes: snap.modes } : {}),
  };
  // the extras ride on the first part, within the same size budget
  const parts = chunkSnapshot(grants, tombstones, SNAPSHOT_PART_BUDGET - JSON.stringify(extras).length);
  const snapshotId = newId();
  // the acks of the whole snapshot name its first part's jti: recorded before anything is sent
  const firstJti = newMessageId();
  await recordSnapshotSent(
    app.db,
    { jti: firstJti, gatewayId, snapshotId, asOfSeq: snap.asOfSeq, keyset: snap.trustedKeys !== null },
    app.clock.now(),
  );
  await answer({ requestId: req.body.requestId, mode: 'snapshot', fromSeq: from, toSeq: snap.asOfSeq, snapshotId });
  for (const [i, p] of parts.entries()) {
    const body: SnapshotBody = {
      snapshotId,
      asOfSeq: snap.asOfSeq,
      part: i + 1,
      parts: parts.length,
      keys: p.keys,
      revoked: p.revoked,
      ...(i === 0 ? extras : {}),
    };
    const draft = { type: 'keyset.snapshot' as const, aud: gatewayId, cid, body, ...(i === 0 ? { jti: firstJti } : {}) };
    await publish(
      (await signMessage<MessageOf<DownlinkMessage, 'keyset.snapshot'>>(r.signer.key, r.signer.issuer, draft, app.clock)).token,
    );
  }
  log.info(
    {
      asOfSeq: snap.asOfSeq,
      parts: parts.length,
      keys: grants.length,
      tombstones: tombstones.length,
      trustedKeys: snap.trustedKeys?.add.length ?? 0,
      retiredKids: snap.trustedKeys?.retire.length ?? 0,
      mode: snap.modes?.mode?.mode ?? null,
      passageDoors: snap.modes?.passage.length ?? 0,
    },
    'resync: snapshot sent',
  );
  return 'snapshot';
}
