import { newId, type DownlinkMessage } from '@tobira/shared';
import { pgBackends } from '@tobira/shared/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fakeGateway, waitFor, type FakeGateway } from '../mqtt-helpers.js';
import { T0, bearer, issueBody, openHarness, seedSite, type Harness } from './harness.js';

type Seq = Extract<DownlinkMessage, { type: 'key.grant' | 'key.revoke' }>;
const sequenced = (ms: readonly DownlinkMessage[]) => ms.filter((m): m is Seq => m.type === 'key.grant' || m.type === 'key.revoke');

/** Through the API and a stand-in gateway on the broker: the cid travels into the signed message and the access event; delivery status follows the acks. */
describe.each(pgBackends())('admin API key delivery end to end on %s', (backend) => {
  let h: Harness;
  beforeAll(async () => {
    h = await openHarness(backend);
  });
  afterAll(async () => {
    await h?.close();
  });

  async function gatewayFor(s: Awaited<ReturnType<typeof seedSite>>): Promise<FakeGateway> {
    const p = s.provisioning as { cloudJwks: { keys: never[] }; cloudIssuer: string };
    return fakeGateway({
      url: h.broker.url,
      gatewayId: s.gatewayId,
      pair: s.pair,
      cloudJwks: p.cloudJwks,
      cloudIssuer: p.cloudIssuer,
      clock: h.cloud.clock,
    });
  }
  let upSeq = 0;
  const ack = (gw: FakeGateway, m: Seq, result: 'applied' | 'refused') =>
    gw.send({
      type: 'ack',
      seq: ++upSeq,
      cid: m.cid,
      body: {
        ackOf: m.jti,
        ackSeq: m.seq,
        result,
        code: result === 'applied' ? 'MESSAGE_APPLIED' : 'MESSAGE_REJECTED',
        keyId: m.type === 'key.grant' ? m.body.key.keyId : m.body.keyId,
        keyVersion: m.type === 'key.grant' ? m.body.key.version : m.body.version,
      },
    });
  const view = async (keyId: string) =>
    (await h.app.inject({ method: 'GET', url: `/keys/${keyId}`, headers: bearer(h.tokens.auditorA) })).json();

  it('the X-Correlation-Id is the cid of the signed grant and of the access event; delivery goes pending → succeeded on the ack', async () => {
    const s = await seedSite(h, h.siteA);
    const gw = await gatewayFor(s);
    try {
      const cid = `e2e-${s.u}`;
      const r = await h.app.inject({
        method: 'POST',
        url: '/keys',
        headers: { ...bearer(h.tokens.managerA), 'x-correlation-id': cid },
        payload: issueBody(s),
      });
      expect(r.statusCode).toBe(202);
      const keyId = r.json().key.id as string;
      const grant = await waitFor(() => sequenced(gw.received)[0], 'grant at the gateway');
      expect(grant).toMatchObject({ type: 'key.grant', cid });
      await ack(gw, grant, 'applied');
      const v = await waitFor(async () => {
        const x = await view(keyId);
        return x.delivery === 'succeeded' ? x : undefined;
      }, 'delivery succeeded');
      expect(v).toMatchObject({ key: { status: 'active' }, errors: [], warnings: [] });
      expect(v.deliveries).toEqual([expect.objectContaining({ status: 'sent', cid })]);
      await gw.send({
        type: 'access.event',
        seq: ++upSeq,
        cid: grant.cid,
        body: {
          eventId: newId(),
          requestId: 'r-1',
          lockId: 'lock-1',
          doorId: s.doorId,
          at: T0,
          allowed: true,
          code: 'ALLOWED',
          keyId,
          keyVersion: 1,
          personId: null,
          credentialType: 'pin',
          commandId: null,
        },
      });
      const ev = await waitFor(async () => {
        const x = (await h.app.inject({ method: 'GET', url: `/access-events?keyId=${keyId}`, headers: bearer(h.tokens.auditorA) })).json();
        return x.items.length > 0 ? x.items : undefined;
      }, 'access event');
      expect(ev).toEqual([expect.objectContaining({ personId: s.personId, cid, code: 'ALLOWED', siteId: h.siteA })]);
    } finally {
      await gw.close();
    }
  });

  it('a grant the gateway rejects shows delivery failed with the code in errors[]', async () => {
    const s = await seedSite(h, h.siteA);
    const gw = await gatewayFor(s);
    try {
      const r = await h.app.inject({ method: 'POST', url: '/keys', headers: bearer(h.tokens.managerA), payload: issueBody(s) });
      const keyId = r.json().key.id as string;
      const grant = await waitFor(() => sequenced(gw.received)[0], 'grant at the gateway');
      await ack(gw, grant, 'refused');
      const v = await waitFor(async () => {
        const x = await view(keyId);
        return x.delivery === 'failed' ? x : undefined;
      }, 'delivery failed');
      expect(v.key.status).toBe('failed');
      expect(v.errors.length).toBeGreaterThan(0);
    } finally {
      await gw.close();
    }
  });
});
