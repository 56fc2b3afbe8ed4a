import { newId } from '@tobira/shared';
import { pgBackends } from '@tobira/shared/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openStaysApi, type StaysApi } from './stays-harness.js';

/**
 * `Stripe-Signature` attacked over HTTP (the listening admin API, real
 * sockets), every header made by the real SDK's `generateTestHeaderString`:
 * the age of a signature is the age of the timestamp the SDK verified the
 * signature over, however the header is arranged. A header that repeats
 * `t=` with a fresh value in front of an old signed one is an old signature.
 */
const SECRET = 'whsec_tobira_webhook_signature';

describe.each(pgBackends())('the Stripe webhook signature on %s', (backend) => {
  let h: StaysApi;
  let url: string;

  beforeAll(async () => {
    h = await openStaysApi(backend, { tag: 'sig', secret: SECRET });
    const addr = h.app.server.address();
    if (addr === null || typeof addr === 'string') throw new Error('not listening');
    url = `http://127.0.0.1:${addr.port}/webhooks/stripe`;
  });
  afterAll(() => h?.close());

  const nowS = () => Math.floor(h.cloud.clock.now() / 1000);
  const event = () => {
    const id = `evt_sig_${newId()}`;
    return { id, body: JSON.stringify({ id, object: 'event', type: 'customer.created', data: { object: { id: 'cus_1' } } }, null, 2) };
  };
  const header = (payload: string, timestamp: number) => h.stripe.webhooks.generateTestHeaderString({ payload, secret: SECRET, timestamp });
  const v1Of = (hdr: string) => {
    const m = /v1=([0-9a-f]+)/.exec(hdr);
    if (!m?.[1]) throw new Error(`no v1 in ${hdr}`);
    return m[1];
  };
  const post = async (body: string, signature: string) => {
    const r = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json', 'stripe-signature': signature }, body });
    return { status: r.status, json: (await r.json()) as { code?: string; status?: string } };
  };
  const stored = async (id: string) => (await h.t.db.query('SELECT 1 FROM payment_webhook_events WHERE event_id = $1', [id])).rows.length;

  it('a fresh t= in front of an old signed t= is refused stale and stores nothing', async () => {
    const e = event();
    const old = nowS() - 3600;
    const forged = `t=${nowS()},t=${old},v1=${v1Of(header(e.body, old))}`;
    const r = await post(e.body, forged);
    expect(r.status).toBe(400);
    expect(r.json).toMatchObject({ status: 'refused', code: 'WEBHOOK_TIMESTAMP_STALE' });
    expect(await stored(e.id)).toBe(0);
  });

  it('an old signature with a fresh t= after it is refused (the signature is not over the fresh one)', async () => {
    const e = event();
    const old = nowS() - 3600;
    const r = await post(e.body, `t=${old},v1=${v1Of(header(e.body, old))},t=${nowS()}`);
    expect(r.status).toBe(400);
    expect(r.json.code).toMatch(/^WEBHOOK_(SIGNATURE_INVALID|TIMESTAMP_STALE)$/);
    expect(await stored(e.id)).toBe(0);
  });

  it('an old signed t= with a fresh signature beside it still needs the signature over the t= the SDK reads', async () => {
    const e = event();
    const old = nowS() - 3600;
    const fresh = nowS();
    // both signatures genuine, the header claims the old timestamp last: verified over the old one → stale
    const r = await post(e.body, `t=${fresh},t=${old},v1=${v1Of(header(e.body, fresh))},v1=${v1Of(header(e.body, old))}`);
    expect(r.status).toBe(400);
    expect(r.json.code).toBe('WEBHOOK_TIMESTAMP_STALE');
    expect(await stored(e.id)).toBe(0);
  });

  it('the same headers with a fresh signed timestamp are accepted (the test is not refusing everything)', async () => {
    const e = event();
    const r = await post(e.body, `t=${nowS() - 3600},t=${nowS()},v1=${v1Of(header(e.body, nowS()))}`);
    expect(r.status).toBe(200);
    expect(r.json).toMatchObject({ status: 'stored' });
    expect(await stored(e.id)).toBe(1);
  });

  it('a forged header with an old timestamp is invalid, never merely stale', async () => {
    const e = event();
    const old = nowS() - 3600;
    const other = h.stripe.webhooks.generateTestHeaderString({ payload: e.body, secret: 'whsec_other', timestamp: old });
    const r = await post(e.body, `t=${nowS()},${other}`);
    expect(r.status).toBe(400);
    expect(r.json.code).toBe('WEBHOOK_SIGNATURE_INVALID');
    expect(await stored(e.id)).toBe(0);
  });
});
