import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { CorruptRow, decodeCursor, encodeCursor, pageOf, parseRow, parseRows } from '../src/rows.js';

const Key = z.tuple([z.int().nonnegative(), z.string().min(1)]);

describe('pagination cursors', () => {
  it('decode what they encoded, for any sort key', () => {
    fc.assert(
      fc.property(fc.nat(), fc.string({ minLength: 1 }), (at, id) => {
        expect(decodeCursor(Key, encodeCursor([at, id]))).toEqual([at, id]);
      }),
    );
  });

  it('are null when absent and "bad" when they are not a cursor of this list', () => {
    expect(decodeCursor(Key, undefined)).toBeNull();
    expect(decodeCursor(Key, 'not base64 json!')).toBe('bad');
    expect(decodeCursor(Key, encodeCursor(['x', 1]))).toBe('bad');
    expect(decodeCursor(Key, Buffer.from('{').toString('base64url'))).toBe('bad');
  });
});

describe('pageOf', () => {
  const rows = [1, 2, 3].map((n) => ({ at: n, id: `r${n}` }));

  it('names the last row of a full page when one more row was read', () => {
    const p = pageOf(rows, 2, (r) => [r.at, r.id]);
    expect(p.items).toEqual(rows.slice(0, 2));
    expect(decodeCursor(Key, p.nextCursor ?? undefined)).toEqual([2, 'r2']);
  });

  it('has no next cursor on the last page', () => {
    expect(pageOf(rows, 3, (r) => [r.at, r.id])).toEqual({ items: rows, nextCursor: null });
  });
});

describe('parseRow', () => {
  const Row = z.object({ id: z.string(), n: z.int() });

  it('returns the parsed row', () => {
    expect(parseRow('things', Row, { id: 'a', n: 1 })).toEqual({ id: 'a', n: 1 });
  });

  it('throws CorruptRow naming the table and the field that did not fit', () => {
    expect(() =>
      parseRows('things', Row, [
        { id: 'a', n: 1 },
        { id: 'b', n: 'x' },
      ]),
    ).toThrow(CorruptRow);
    expect(() => parseRow('things', Row, { id: 'b', n: 'x' })).toThrow(/corrupt row in things: n:/);
  });
});
