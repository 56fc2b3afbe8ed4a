import { randomUUID } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import {
  asDoorId,
  asKeyId,
  asPersonId,
  connectMqtt,
  credentialDigest,
  decodeSecret,
  generateSigningKeyPair,
  importSigningKey,
  newCorrelationId,
  signMessage,
  systemClock,
  topics,
  waitConnected,
  type DownlinkMessage,
  type KeyGrant,
} from '@tobira/shared';
import { round } from './results.js';
import { Locks, pollLock, startGatewayProcess, tempDir } from './stack.js';

/**
 * A gateway with an empty database catches up on a big key set: the bench
 * plays the cloud (signing key, heartbeats, the resync answer and the
 * `keyset.snapshot` parts, each under the 64 KiB message limit and the
 * schema's 1000 keys per part), and a lock polls with the PIN of the last
 * key of the snapshot. `resync_100k_keys_s` runs from the moment the
 * gateway's resync request arrives (the bench answers at once; the parts are
 * signed beforehand, as a cloud would stream them) to the first decision
 * that opens with that PIN; `gateway_rss_mb_100k_keys` is the gateway
 * process's RSS right then.
 */
export interface ResyncResult {
  readonly seconds: number;
  readonly rssMb: number;
  readonly parts: number;
}

const GATEWAY_ID = 'gw-resync';
/** Raw JSON per part, as the cloud's chunkSnapshot (base64url grows it by 4/3; the token must stay under 64 KiB). */
const PART_BUDGET = Math.floor((64 * 1024 * 3) / 4) - 4096;
const DAY = 86_400_000;

export async function runResync(o: { brokerUrl: string; keys: number; log: (s: string) => void }): Promise<ResyncResult> {
  const tmp = tempDir('tobira-bench-resync-');
  const cloudPair = await generateSigningKeyPair();
  const gwPair = await generateSigningKeyPair();
  const { writeFileSync } = await import('node:fs');
  const { join } = await import('node:path');
  writeFileSync(join(tmp.dir, 'key.json'), JSON.stringify(gwPair));
  const pepperText = Buffer.from(crypto.getRandomValues(new Uint8Array(32))).toString('base64url');
  const pepper = decodeSecret(pepperText);
  const locks = ['lock-1'];
  const config = {
    gatewayId: GATEWAY_ID,
    keyPairFile: join(tmp.dir, 'key.json'),
    cloud: { url: o.brokerUrl, jwks: { keys: [cloudPair.publicJwk] } },
    site: { url: o.brokerUrl },
    sqlitePath: join(tmp.dir, 'gw.sqlite'),
    locks: locks.map((lockId) => ({
      lockId,
      doorId: 'door-1',
      pairingSecret: Buffer.from(crypto.getRandomValues(new Uint8Array(32))).toString('base64url'),
    })),
    credentialPepper: pepperText,
    http: null,
    lockout: { limit: 0, cooldownSeconds: 60 },
    siteLockout: { limit: 0, windowSeconds: 600, cooldownSeconds: 300 },
    requestRate: { burst: 1_000_000, perSecond: 1000 },
  };

  // the snapshot, split and signed before the clock starts
  const now = Date.now();
  const pinOf = (i: number) => String(10_000_000 + i);
  const grants: KeyGrant[] = Array.from({ length: o.keys }, (_, i) => ({
    keyId: asKeyId(`key-${i}`),
    version: 1,
    personId: asPersonId(`person-${i}`),
    credential: { type: 'pin', digest: credentialDigest(pepper, 'pin', pinOf(i)) },
    doors: [asDoorId('door-1')],
    validFrom: now - DAY,
    validUntil: now + 30 * DAY,
    schedule: null,
    offlineCapable: false,
  }));
  const chunks: KeyGrant[][] = [];
  let cur: KeyGrant[] = [];
  let size = 0;
  for (const k of grants) {
    const n = JSON.stringify(k).length + 1;
    if (cur.length > 0 && (size + n > PART_BUDGET || cur.length >= 1000)) {
      chunks.push(cur);
      cur = [];
      size = 0;
    }
    cur.push(k);
    size += n;
  }
  if (cur.length > 0) chunks.push(cur);
  const cloudKey = await importSigningKey(cloudPair.privateJwk);
  const sign = async (draft: Record<string, unknown>) =>
    (
      await signMessage<DownlinkMessage>(
        cloudKey,
        'tobira-cloud',
        { aud: GATEWAY_ID, cid: newCorrelationId(), ...draft } as never,
        systemClock,
      )
    ).token;
  const snapshotId = randomUUID();
  const AS_OF = 1;
  const parts = await Promise.all(
    chunks.map((keys, i) =>
      sign({ type: 'keyset.snapshot', body: { snapshotId, asOfSeq: AS_OF, part: i + 1, parts: chunks.length, keys, revoked: [] } }),
    ),
  );
  o.log(`resync: ${o.keys} keys in ${parts.length} signed parts`);

  const cloud = connectMqtt(o.brokerUrl, { clientId: `bench-resync-cloud-${randomUUID().slice(0, 8)}` });
  await waitConnected(cloud);
  await cloud.subscribeAsync(topics.gatewayUp(GATEWAY_ID), { qos: 1 });
  const down = (token: string) => cloud.publishAsync(topics.gatewayDown(GATEWAY_ID), token, { qos: 1 });
  let requestedAt = 0;
  const answered = new Promise<void>((resolve) => {
    cloud.on('message', (_t, payload) => {
      const claims: unknown = JSON.parse(Buffer.from(payload.toString().split('.')[1] ?? '', 'base64url').toString());
      if (typeof claims !== 'object' || claims === null || !('type' in claims) || claims.type !== 'resync.request' || requestedAt !== 0)
        return;
      const body = 'body' in claims && typeof claims.body === 'object' && claims.body !== null ? claims.body : {};
      const requestId = 'requestId' in body && typeof body.requestId === 'string' ? body.requestId : '';
      const from = 'lastAppliedSeq' in body && typeof body.lastAppliedSeq === 'number' ? body.lastAppliedSeq : 0;
      requestedAt = performance.now();
      void (async () => {
        await down(await sign({ type: 'resync.answer', body: { requestId, mode: 'snapshot', fromSeq: from, toSeq: AS_OF, snapshotId } }));
        for (const p of parts) await down(p);
        resolve();
      })();
    });
  });
  const heartbeat = async () => down(await sign({ type: 'heartbeat', body: { lastSeq: AS_OF, intervalMs: 1000 } }));
  const gateway = await startGatewayProcess([config]);
  const lockSim = await Locks.open(o.brokerUrl, GATEWAY_ID, locks);
  const beats = setInterval(() => void heartbeat(), 500);
  try {
    await heartbeat(); // names seq 1: the empty gateway is behind and asks for a resync
    await answered;
    const open = await pollLock(lockSim, 'lock-1', pinOf(o.keys - 1), (d) => d.allowed, 120_000);
    if (open === null) throw new Error('the gateway never opened with the snapshot');
    const seconds = round((open - requestedAt) / 1000, 2);
    const rssMb = await gateway.rssMb();
    o.log(`resync of ${o.keys} keys: serving after ${seconds} s, gateway RSS ${rssMb} MB`);
    return { seconds, rssMb, parts: parts.length };
  } finally {
    clearInterval(beats);
    await lockSim.close();
    await cloud.endAsync(true);
    await gateway.stop();
    tmp.remove();
  }
}
