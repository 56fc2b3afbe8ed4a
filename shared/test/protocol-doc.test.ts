import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import {
  DECISION_CODES,
  DownlinkMessage,
  GATEWAY_CHANNELS,
  LOCK_CHANNELS,
  LOCK_COMMAND_CODES,
  ManualClock,
  UPLINK_BATCH_CODES,
  UplinkEnvelope,
  VERIFY_CODES,
  checkLockCommand,
  decodeSecret,
  LockRequest,
  parseTopic,
  verifyMessage,
  verifyMobileTokenSignature,
  type LockCommand,
} from '../src/index.js';
import { DOC_PATH, EXAMPLE, applyExamples, exampleKeySets, generatedNames, renderProtocolExamples } from '../scripts/protocol-examples.js';

const doc = readFileSync(DOC_PATH, 'utf8');
const blocks = await renderProtocolExamples();
const keys = await exampleKeySets();
const clock = new ManualClock(EXAMPLE.now);

describe('docs/protocol.md', () => {
  it('holds exactly the examples the code generates today (run `npm run docs:protocol` after a change)', () => {
    expect(applyExamples(doc, blocks)).toBe(doc);
    expect(generatedNames(doc).sort()).toEqual(Object.keys(blocks).sort());
  });

  it('every signed example in the document verifies with the example keys', async () => {
    const tokens = [...doc.matchAll(/```text\n([A-Za-z0-9_.-]+)\n```/g)].map((m) => m[1] as string);
    expect(tokens.length).toBe(17);
    for (const token of tokens) {
      const down = await verifyMessage(token, {
        keys: keys.cloud,
        issuer: EXAMPLE.cloudIssuer,
        audience: EXAMPLE.gatewayId,
        schema: DownlinkMessage,
        clock,
      });
      const up = await verifyMessage(token, {
        keys: keys.gateway,
        issuer: EXAMPLE.gatewayId,
        audience: EXAMPLE.cloudIssuer,
        schema: UplinkEnvelope,
        clock,
      });
      expect(down.ok || up.ok, token.slice(0, 40)).toBe(true);
    }
  });

  it('the example lock command passes the lock-side check with the example pairing secret', () => {
    const m = /BEGIN GENERATED: lock.command -->[\s\S]*?```json\n([\s\S]*?)\n```/.exec(doc);
    const command = JSON.parse(m?.[1] ?? 'null') as LockCommand;
    const secret = decodeSecret(
      (JSON.parse(readFileSync(new URL('../scripts/example-keys.json', import.meta.url), 'utf8')) as { pairingSecret: string })
        .pairingSecret,
    );
    expect(checkLockCommand(secret, command, { lockId: EXAMPLE.lockId, now: EXAMPLE.now, seen: new Set() })).toEqual({ ok: true });
  });

  it('the mobile_token example is a real token: it verifies with the example cloud key, and its decoded claims are what it carries', () => {
    const m =
      /BEGIN GENERATED: lock.request.mobile_token -->[\s\S]*?```json\n([\s\S]*?)\n```[\s\S]*?```json\n[\s\S]*?\n```\n\n```json\n([\s\S]*?)\n```/.exec(
        doc,
      );
    const request = LockRequest.parse(JSON.parse(m?.[1] ?? 'null'));
    if (request.credential.type !== 'mobile_token') throw new Error('not a mobile_token request');
    const v = verifyMobileTokenSignature(request.credential.value, keys.cloud, EXAMPLE.cloudIssuer);
    expect(v).toMatchObject({ ok: true, claims: JSON.parse(m?.[2] ?? 'null') as object });
    // and a token with a byte changed does not
    const bad = request.credential.value.slice(0, -2) + (request.credential.value.endsWith('AA') ? 'AB' : 'AA');
    expect(verifyMobileTokenSignature(bad, keys.cloud, EXAMPLE.cloudIssuer)).toMatchObject({ ok: false });
  });

  it('documents every message type, topic channel and code', () => {
    const types = [...DownlinkMessage.options, ...UplinkEnvelope.options].map((o) => o.shape.type.value);
    for (const t of types) expect(doc, t).toContain(`#### \`${t}\``);
    for (const c of LOCK_CHANNELS) expect(doc, c).toContain(`/lock/{lockId}/${c}\``);
    for (const c of GATEWAY_CHANNELS) expect(doc, c).toContain(`gw/{gatewayId}/${c}\``);
    for (const code of [...Object.keys(VERIFY_CODES), ...Object.keys(DECISION_CODES), ...Object.keys(UPLINK_BATCH_CODES)])
      expect(doc, code).toContain(`| \`${code}\` |`);
    for (const code of Object.keys(LOCK_COMMAND_CODES)) expect(doc, code).toContain(`| \`${code}\` |`);
  });

  it('every topic the document shows parses', () => {
    const shown = [...doc.matchAll(/Topic: `([^`]+)`/g)].map((m) => m[1]);
    expect(shown.length).toBeGreaterThan(10);
    for (const t of shown) expect(parseTopic(t), t).not.toBeNull();
  });
});
