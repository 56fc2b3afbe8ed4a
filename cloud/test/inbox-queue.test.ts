import { describe, expect, it } from 'vitest';
import { InboxQueue } from '../src/adapters/mqtt/inbox-queue.js';

/** A handler whose calls a test resolves or rejects one by one. */
function controlled() {
  const calls: { topic: string; resolve: () => void; reject: (e: Error) => void }[] = [];
  const handle = (topic: string) =>
    new Promise<void>((resolve, reject) => {
      calls.push({ topic, resolve, reject });
    });
  return { calls, handle };
}

const tick = () => new Promise((r) => setTimeout(r, 0));

describe('the inbox queue', () => {
  it('runs different keys at once and one key in arrival order; acknowledges only after handling, in receipt order', async () => {
    const h = controlled();
    const acks: string[] = [];
    const q = new InboxQueue({ maxInFlight: 8, handle: h.handle, onFailed: () => {} });
    const released: string[] = [];
    for (const [key, topic] of [
      ['a', 'a1'],
      ['b', 'b1'],
      ['a', 'a2'],
    ] as const)
      q.accept(
        key,
        topic,
        Buffer.from(''),
        () => acks.push(topic),
        () => released.push(topic),
      );
    await tick();
    expect(released).toEqual(['a1', 'b1', 'a2']);
    // a2 waits for a1; b1 runs beside a1
    expect(h.calls.map((c) => c.topic)).toEqual(['a1', 'b1']);
    h.calls[1]?.resolve(); // b1 done first
    await tick();
    expect(acks).toEqual([]); // its PUBACK waits for a1, received before it
    h.calls[0]?.resolve(); // a1
    await tick();
    expect(acks).toEqual(['a1', 'b1']);
    expect(h.calls.map((c) => c.topic)).toEqual(['a1', 'b1', 'a2']);
    h.calls[2]?.resolve();
    await q.idle();
    expect(acks).toEqual(['a1', 'b1', 'a2']);
  });

  it('stops taking messages at its bound and takes the next when one settles', async () => {
    const h = controlled();
    const q = new InboxQueue({ maxInFlight: 2, handle: h.handle, onFailed: () => {} });
    const released: number[] = [];
    for (let i = 1; i <= 4; i++) q.accept(`k${i}`, `t${i}`, Buffer.from(''), null, () => released.push(i));
    // the 2nd filled it: its release (and so the transport's next message) is held back
    expect(released).toEqual([1]);
    await tick();
    h.calls[0]?.resolve();
    await tick();
    expect(released).toEqual([1, 2]);
  });

  it('sends no PUBACK for a failed handling, and none for messages of a lost connection', async () => {
    const h = controlled();
    const acks: string[] = [];
    const failed: string[] = [];
    const q = new InboxQueue({ maxInFlight: 8, handle: h.handle, onFailed: (_e, t) => failed.push(t) });
    const take = (key: string, topic: string) =>
      q.accept(
        key,
        topic,
        Buffer.from(''),
        () => acks.push(topic),
        () => {},
      );
    take('a', 'x');
    take('b', 'y');
    await tick();
    h.calls[0]?.reject(new Error('database down'));
    h.calls[1]?.resolve();
    await tick();
    expect(failed).toEqual(['x']);
    expect(acks).toEqual(['y']);
    take('a', 'z');
    await tick();
    q.connectionLost();
    h.calls[2]?.resolve();
    await q.idle();
    expect(acks).toEqual(['y']);
  });

  it('refuses a bound that is not a positive integer', () => {
    expect(() => new InboxQueue({ maxInFlight: 0, handle: async () => {}, onFailed: () => {} })).toThrow(/positive integer/);
  });
});
