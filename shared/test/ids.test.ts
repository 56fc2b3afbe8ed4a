import { describe, expect, it } from 'vitest';
import { MessageId, newCorrelationId, newId, newMessageId } from '../src/ids.js';

/**
 * Ids from pooled randomness (ids.ts): still UUIDv7, still in the order they
 * were made (the monotonic sequence within a millisecond), and no random
 * bytes used twice across pool refills.
 */
describe('ids', () => {
  it('are UUIDv7 with the RFC variant, and every kind is a valid message id', () => {
    for (const id of [newId(), newMessageId(), newCorrelationId()]) {
      expect(id).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
      expect(MessageId.safeParse(id).success).toBe(true);
    }
  });

  it('sort in the order they were made, with no duplicate and no random tail used twice, over many pool refills', () => {
    const ids = Array.from({ length: 100_000 }, () => newId());
    for (let i = 1; i < ids.length; i++) expect(ids[i]! > ids[i - 1]!).toBe(true);
    expect(new Set(ids).size).toBe(ids.length);
    // the last 48 bits are pure randomness: 100,000 of them repeat by chance with probability ~2e-5
    const tails = new Set(ids.map((id) => id.slice(-12)));
    expect(tails.size).toBe(ids.length);
  });

  it('carry the current time in their first 48 bits', () => {
    const before = Date.now();
    const id = newId();
    const ms = parseInt(id.replace(/-/g, '').slice(0, 12), 16);
    expect(ms).toBeGreaterThanOrEqual(before);
    expect(ms).toBeLessThanOrEqual(Date.now() + 1000);
  });
});
