import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import {
  KeySet,
  asDoorId,
  asKeyId,
  asLockId,
  asPersonId,
  LOCK_CHANNEL_SCHEMAS,
  credentialDigest,
  decodeSecret,
  importSigningKey,
  signLockCommand,
  signMessage,
  signMobileToken,
  topics,
  type Clock,
  type CorrelationId,
  type DownlinkMessage,
  type KeyGrant,
  type MessageId,
  type UplinkBatchMessage,
  type UplinkMessage,
  signUplinkKeyProof,
} from '../src/index.js';

/**
 * Builds the examples in docs/protocol.md from the real code: real schemas,
 * real signatures (Ed25519 is deterministic, so with the fixed docs-only keys,
 * ids and clock below the output is stable). A test regenerates them and
 * compares with the document, so the document cannot drift from the code.
 */
export const DOC_PATH = fileURLToPath(new URL('../../docs/protocol.md', import.meta.url));
const keysFile = JSON.parse(readFileSync(new URL('./example-keys.json', import.meta.url), 'utf8')) as {
  cloud: Record<string, string>;
  gateway: Record<string, string>;
  /** The gateway's next uplink key, for the uplink-key rotation examples. */
  gatewayNext: Record<string, string>;
  pairingSecret: string;
  credentialPepper: string;
};

export const EXAMPLE = Object.freeze({
  cloudIssuer: 'tobira-cloud',
  gatewayId: 'gw-1',
  lockId: 'L1',
  now: Date.UTC(2026, 10, 29, 9, 0, 0),
});
const clock: Clock = { now: () => EXAMPLE.now };
const id = (n: number) => `01900000-0000-7000-8000-${String(n).padStart(12, '0')}`;
const mid = (n: number) => id(n) as MessageId;
const cid = 'req-7f3a9c' as CorrelationId;

export async function exampleKeySets() {
  const pub = (jwk: Record<string, string>) => {
    const { d: _d, ...rest } = jwk;
    return rest;
  };
  return {
    cloud: await KeySet.fromJwks({ keys: [pub(keysFile.cloud)] }),
    gateway: await KeySet.fromJwks({ keys: [pub(keysFile.gateway)] }),
  };
}

const json = (v: unknown) => '```json\n' + JSON.stringify(v, null, 2) + '\n```';

function signedBlock(topic: string, token: string, message: unknown): string {
  const [h] = token.split('.') as [string];
  return [
    `Topic: \`${topic}\``,
    '',
    'Protected header:',
    '',
    json(JSON.parse(Buffer.from(h, 'base64url').toString('utf8'))),
    '',
    'Claims:',
    '',
    json(message),
    '',
    'On the wire (compact JWS, the whole MQTT payload):',
    '',
    '```text',
    token,
    '```',
  ].join('\n');
}

export async function renderProtocolExamples(): Promise<Record<string, string>> {
  const cloudKey = await importSigningKey(keysFile.cloud);
  const gwKey = await importSigningKey(keysFile.gateway);
  const gw = EXAMPLE.gatewayId;
  const pepper = decodeSecret(keysFile.credentialPepper);
  const grant: KeyGrant = {
    keyId: asKeyId('key_01900000a'),
    version: 1,
    personId: asPersonId('person_01900000b'),
    credential: { type: 'pin', digest: credentialDigest(pepper, 'pin', '1234') },
    doors: [asDoorId('door-101')],
    validFrom: Date.UTC(2026, 10, 29, 15),
    validUntil: Date.UTC(2026, 11, 1, 10),
    schedule: { timeZone: 'Asia/Tokyo', windows: [{ days: [1, 2, 3, 4, 5], start: '07:00', end: '22:00' }] },
    offlineCapable: false,
    personName: 'Aiko Tanaka',
    doorNames: { [asDoorId('door-101')]: 'Room 101' },
  };
  const down = async (draft: Parameters<typeof signMessage<DownlinkMessage>>[2]) => {
    const { token, message } = await signMessage<DownlinkMessage>(cloudKey, EXAMPLE.cloudIssuer, draft, clock);
    return signedBlock(topics.gatewayDown(gw), token, message);
  };
  const up = async (draft: Parameters<typeof signMessage<UplinkMessage>>[2]) => {
    const { token, message } = await signMessage<UplinkMessage>(gwKey, gw, draft, clock);
    return signedBlock(topics.gatewayUp(gw), token, message);
  };
  const plain = (topic: string, schema: keyof typeof LOCK_CHANNEL_SCHEMAS, value: unknown) => {
    LOCK_CHANNEL_SCHEMAS[schema].parse(value);
    return [`Topic: \`${topic}\``, '', json(value)].join('\n');
  };
  const lockTopic = (c: Parameters<typeof topics.lock>[2]) => topics.lock(gw, EXAMPLE.lockId, c);
  const { d: _d, ...cloudJwk } = keysFile.cloud;
  const cloudPublic = { kty: 'OKP', crv: 'Ed25519', x: String(cloudJwk.x), kid: cloudKey.kid } as const;
  // a mobile token as POST /keys/{keyId}/mobile-token signs it (for a mobile key of the grant's person), relayed by the lock
  const mobile = await signMobileToken(
    cloudKey,
    EXAMPLE.cloudIssuer,
    { gatewayId: gw, keyId: 'key_01900000d', personId: grant.personId, jti: id(108), ttlSeconds: 300 },
    clock,
  );
  const mobileRequest = {
    requestId: 'L1-000043',
    credential: { type: 'mobile_token', value: mobile.token },
    at: EXAMPLE.now + 60_000,
  };
  const command = signLockCommand(decodeSecret(keysFile.pairingSecret), {
    commandId: id(301),
    lockId: asLockId(EXAMPLE.lockId),
    action: 'unlock',
    holdMs: 5000,
    expiresAt: EXAMPLE.now + 10_000,
  });

  return {
    'key.grant': await down({ type: 'key.grant', jti: mid(1), aud: gw, seq: 42, cid, body: { key: grant } }),
    'key.revoke': await down({
      type: 'key.revoke',
      jti: mid(2),
      aud: gw,
      seq: 43,
      cid,
      body: { keyId: grant.keyId, version: 2, reason: 'stay_cancelled' },
    }),
    heartbeat: await down({
      type: 'heartbeat',
      jti: mid(3),
      aud: gw,
      cid,
      ttlSeconds: 60,
      body: { lastSeq: 43, intervalMs: 10_000, uplinkAck: { seq: 17, jti: mid(9) } },
    }),
    'resync.answer': await down({
      type: 'resync.answer',
      jti: mid(4),
      aud: gw,
      cid,
      body: { requestId: id(104), mode: 'snapshot', fromSeq: 12, toSeq: 43, snapshotId: id(105) },
    }),
    'keyset.snapshot': await down({
      type: 'keyset.snapshot',
      jti: mid(5),
      aud: gw,
      cid,
      body: {
        snapshotId: id(105),
        asOfSeq: 43,
        part: 1,
        parts: 1,
        keys: [grant],
        revoked: [{ keyId: asKeyId('key_01900000c'), version: 3 }],
        trustedKeys: {
          add: [{ jwk: cloudPublic, notBefore: Date.UTC(2026, 9, 1) }],
          retire: [{ kid: 'Yk0tq1rpmXyA4NYkZ5m8R2d0t3xv1bC9ZsOjF2hVwPI', at: Date.UTC(2026, 10, 2) }],
        },
        modes: {
          mode: { seq: 40, requestId: id(106), mode: 'normal', by: 'ops-console', reason: null },
          passage: [
            {
              seq: 41,
              requestId: id(107),
              doorId: asDoorId('door-lobby'),
              schedule: { timeZone: 'Asia/Tokyo', windows: [{ days: [1, 2, 3, 4, 5], start: '08:00', end: '20:00' }] },
              by: 'ops-console',
              reason: 'lobby hours',
            },
          ],
        },
      },
    }),
    'keyset.update': await down({
      type: 'keyset.update',
      jti: mid(6),
      aud: gw,
      seq: 44,
      cid,
      body: {
        updateId: id(106),
        add: [
          {
            jwk: {
              kty: 'OKP',
              crv: 'Ed25519',
              x: 'N3rReLRkfYEkv1TgoA86MQuBbSorSbZiiiyVqgXaIH8',
              kid: 'cloud-2027',
              alg: 'EdDSA',
              use: 'sig',
            },
            notBefore: EXAMPLE.now,
          },
        ],
        retire: [],
      },
    }),
    'site.mode': await down({
      type: 'site.mode',
      jti: mid(7),
      aud: gw,
      seq: 45,
      cid,
      body: {
        requestId: id(107),
        mode: null,
        passage: [
          {
            doorId: asDoorId('door-101'),
            schedule: { timeZone: 'Asia/Tokyo', windows: [{ days: [1, 2, 3, 4, 5], start: '08:00', end: '20:00' }] },
          },
        ],
        by: 'kyoto pms',
        reason: 'lobby hours',
      },
    }),
    ack: await up({
      type: 'ack',
      jti: mid(11),
      aud: EXAMPLE.cloudIssuer,
      seq: 7,
      cid,
      body: { ackOf: mid(1), ackSeq: 42, result: 'applied', code: 'MESSAGE_APPLIED', keyId: grant.keyId, keyVersion: 1 },
    }),
    'access.event': await up({
      type: 'access.event',
      jti: mid(12),
      aud: EXAMPLE.cloudIssuer,
      seq: 8,
      cid,
      body: {
        eventId: id(201),
        requestId: 'L1-000042',
        lockId: asLockId(EXAMPLE.lockId),
        doorId: asDoorId('door-101'),
        at: EXAMPLE.now,
        allowed: true,
        code: 'ALLOWED',
        keyId: grant.keyId,
        keyVersion: 1,
        personId: grant.personId,
        credentialType: 'pin',
        commandId: id(301),
      },
    }),
    alarm: await up({
      type: 'alarm',
      jti: mid(13),
      aud: EXAMPLE.cloudIssuer,
      seq: 9,
      cid: 'alarm-01900000d' as CorrelationId,
      body: { alarmId: id(202), lockId: asLockId(EXAMPLE.lockId), doorId: asDoorId('door-101'), kind: 'forced_open', at: EXAMPLE.now },
    }),
    'gateway.status': await up({
      type: 'gateway.status',
      jti: mid(14),
      aud: EXAMPLE.cloudIssuer,
      seq: 10,
      cid: 'status-01900000e' as CorrelationId,
      body: {
        mode: 'normal',
        appliedSeq: 43,
        leaseExpiresAt: EXAMPLE.now + 300_000,
        outboxDepth: 0,
        locks: [{ lockId: asLockId(EXAMPLE.lockId), online: true, bolt: 'locked', door: 'closed', battery: 87, at: EXAMPLE.now }],
      },
    }),
    'uplink_key.rotate': await down({
      type: 'uplink_key.rotate',
      jti: mid(18),
      aud: gw,
      seq: 46,
      cid,
      body: { rotationId: id(108) },
    }),
    'uplink_key.activate': await down({
      type: 'uplink_key.activate',
      jti: mid(19),
      aud: gw,
      seq: 47,
      cid,
      body: { rotationId: id(108), kid: keysFile.gatewayNext.kid! },
    }),
    'uplink_key.proposal': await up({
      type: 'uplink_key.proposal',
      jti: mid(17),
      aud: EXAMPLE.cloudIssuer,
      seq: 12,
      cid,
      body: {
        rotationId: id(108),
        publicJwk: { kty: 'OKP', crv: 'Ed25519', x: keysFile.gatewayNext.x!, kid: keysFile.gatewayNext.kid!, alg: 'EdDSA', use: 'sig' },
        proof: signUplinkKeyProof(keysFile.gatewayNext, gw, id(108), keysFile.gatewayNext.kid!),
      },
    }),
    'staff.action': await up({
      type: 'staff.action',
      jti: mid(16),
      aud: EXAMPLE.cloudIssuer,
      seq: 11,
      cid: 'staff-019000010' as CorrelationId,
      body: {
        actionId: id(203),
        at: EXAMPLE.now,
        actor: { accountId: '01900000-0000-7000-8000-000000000501', name: 'Aiko Tanaka' },
        action: 'remote_unlock',
        target: EXAMPLE.lockId,
        detail: 'guest locked out, room 101',
        result: 'applied',
        code: null,
      },
    }),
    'resync.request': await up({
      type: 'resync.request',
      jti: mid(15),
      aud: EXAMPLE.cloudIssuer,
      cid: 'resync-01900000f' as CorrelationId,
      body: { requestId: id(104), lastAppliedSeq: 12, reason: 'gap' },
    }),
    'uplink.batch': await (async () => {
      const items = [
        {
          type: 'access.event',
          seq: 12,
          jti: mid(17),
          cid: 'req-8b1d22' as CorrelationId,
          body: {
            eventId: id(204),
            requestId: 'L1-000043',
            lockId: asLockId(EXAMPLE.lockId),
            doorId: asDoorId('door-101'),
            at: EXAMPLE.now + 60_000,
            allowed: false,
            code: 'UNKNOWN_CREDENTIAL',
            keyId: null,
            keyVersion: null,
            personId: null,
            credentialType: 'card',
            commandId: null,
          },
        },
        {
          type: 'ack',
          seq: 13,
          jti: mid(18),
          cid,
          body: { ackOf: mid(2), ackSeq: 43, result: 'applied', code: 'KEY_REVOKED', keyId: grant.keyId, keyVersion: 2 },
        },
      ];
      const { token, message } = await signMessage<UplinkBatchMessage>(
        gwKey,
        gw,
        { type: 'uplink.batch', jti: mid(19), aud: EXAMPLE.cloudIssuer, cid: 'req-8b1d22' as CorrelationId, body: { items } },
        clock,
      );
      return signedBlock(topics.gatewayUp(gw), token, message);
    })(),
    'lock.request': plain(lockTopic('request'), 'request', {
      requestId: 'L1-000042',
      credential: { type: 'pin', value: '1234' },
      at: EXAMPLE.now,
    }),
    'lock.request.mobile_token': [
      plain(lockTopic('request'), 'request', mobileRequest),
      '',
      "The token's protected header and claims (decoded from `credential.value`):",
      '',
      json(JSON.parse(Buffer.from(mobile.token.split('.')[0] as string, 'base64url').toString('utf8'))),
      '',
      json(mobile.claims),
    ].join('\n'),
    'lock.decision': plain(lockTopic('decision'), 'decision', {
      requestId: 'L1-000042',
      allowed: true,
      code: 'ALLOWED',
      commandId: id(301),
    }),
    'lock.command': plain(lockTopic('command'), 'command', command),
    'lock.state': plain(lockTopic('state'), 'state', {
      lockId: EXAMPLE.lockId,
      bolt: 'unlocked',
      door: 'closed',
      battery: 87,
      at: EXAMPLE.now + 40,
      lastCommandId: id(301),
    }),
    'lock.event': plain(lockTopic('event'), 'event', {
      eventId: id(401),
      lockId: EXAMPLE.lockId,
      at: EXAMPLE.now + 40,
      kind: 'command_result',
      commandId: id(301),
      result: 'executed',
      code: null,
    }),
    'lock.alarm': plain(lockTopic('event'), 'event', {
      eventId: id(402),
      lockId: EXAMPLE.lockId,
      at: EXAMPLE.now + 90_000,
      kind: 'door_ajar',
    }),
    'lock.privacy': plain(lockTopic('event'), 'event', {
      eventId: id(403),
      lockId: EXAMPLE.lockId,
      at: EXAMPLE.now + 120_000,
      kind: 'privacy',
      active: true,
    }),
    presence: plain(lockTopic('presence'), 'presence', { online: false }),
  };
}

const BLOCK = /<!-- BEGIN GENERATED: ([\w.-]+) -->\n[\s\S]*?<!-- END GENERATED: \1 -->/g;

/** Replaces every generated block of the document with its fresh rendering. */
export function applyExamples(doc: string, blocks: Record<string, string>): string {
  return doc.replace(BLOCK, (_m, name: string) => {
    const body = blocks[name];
    if (body === undefined) throw new Error(`docs/protocol.md names an unknown example: ${name}`);
    return `<!-- BEGIN GENERATED: ${name} -->\n${body}\n<!-- END GENERATED: ${name} -->`;
  });
}

export function generatedNames(doc: string): string[] {
  return [...doc.matchAll(BLOCK)].map((m) => m[1] as string);
}
