import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { UPLINK_BATCH_MAX_ITEMS, UplinkBatchMessage, checkUplinkBatch, newCorrelationId, newMessageId } from '../src/index.js';
import { uplinkDraft } from './arbitraries.js';

const envelope = (items: unknown[]) =>
  UplinkBatchMessage.parse({
    jti: newMessageId(),
    iss: 'gw-1',
    aud: 'tobira-cloud',
    iat: 1,
    exp: 2,
    cid: newCorrelationId(),
    type: 'uplink.batch',
    body: { items },
  });

/** Sequenced uplink drafts as batch items, renumbered from `first`. */
const items = (min = 1) =>
  fc
    .tuple(
      fc.array(
        uplinkDraft.filter((d) => d.type !== 'resync.request'),
        { minLength: min, maxLength: 8 },
      ),
      fc.integer({ min: 1, max: 1_000_000 }),
    )
    .map(([ds, first]) => ds.map((d, i) => ({ type: d.type, seq: first + i, jti: newMessageId(), cid: newCorrelationId(), body: d.body })));

describe('checkUplinkBatch', () => {
  it('accepts consecutive valid items and gives them back as the messages they stand for, in order', () => {
    fc.assert(
      fc.property(items(), (its) => {
        const m = envelope(its);
        const c = checkUplinkBatch(m);
        expect(c.ok).toBe(true);
        if (!c.ok) return;
        expect(c.items.map((x) => [x.type, x.seq, x.jti, x.cid, x.iss, x.aud])).toEqual(
          its.map((x) => [x.type, x.seq, x.jti, x.cid, 'gw-1', 'tobira-cloud']),
        );
      }),
    );
  });

  it('refuses any reordering, gap or repeat of the seqs as a whole', () => {
    fc.assert(
      fc.property(
        items(2),
        fc.integer({ min: 0, max: 7 }),
        fc.integer({ min: -3, max: 3 }).filter((d) => d !== 0),
        (its, at, delta) => {
          const i = at % its.length;
          const broken = its.map((x, k) => (k === i ? { ...x, seq: Math.max(1, x.seq + delta) } : x));
          if (broken[i]!.seq === its[i]!.seq) return;
          expect(checkUplinkBatch(envelope(broken))).toMatchObject({ ok: false, code: 'BATCH_SEQ_NOT_CONSECUTIVE' });
        },
      ),
    );
  });

  it('refuses a resync.request or a nested batch, a repeated jti, and an item its own schema refuses', () => {
    const [a, b] = [1, 2].map((seq) => ({
      type: 'alarm',
      seq,
      jti: newMessageId(),
      cid: newCorrelationId(),
      body: { alarmId: '01900000-0000-7000-8000-000000000202', lockId: 'L1', doorId: null, kind: 'jam', at: 1 },
    })) as unknown as [Record<string, unknown>, Record<string, unknown>];
    expect(checkUplinkBatch(envelope([a, { ...b, type: 'resync.request' }]))).toMatchObject({ ok: false, code: 'BATCH_TYPE_NOT_ALLOWED' });
    expect(checkUplinkBatch(envelope([a, { ...b, type: 'uplink.batch' }]))).toMatchObject({ ok: false, code: 'BATCH_TYPE_NOT_ALLOWED' });
    expect(checkUplinkBatch(envelope([a, { ...b, jti: a.jti }]))).toMatchObject({ ok: false, code: 'BATCH_DUPLICATE_ITEM' });
    expect(checkUplinkBatch(envelope([a, { ...b, body: { ...(b.body as object), kind: 'fire' } }]))).toMatchObject({
      ok: false,
      code: 'BATCH_ITEM_INVALID',
    });
    expect(checkUplinkBatch(envelope([a, b]))).toMatchObject({ ok: true });
  });

  it('the envelope schema bounds the number of items', () => {
    const it1 = { type: 'alarm', seq: 1, jti: newMessageId(), cid: newCorrelationId(), body: {} };
    expect(() => envelope([])).toThrow();
    expect(() => envelope(Array.from({ length: UPLINK_BATCH_MAX_ITEMS + 1 }, () => it1))).toThrow();
  });
});
