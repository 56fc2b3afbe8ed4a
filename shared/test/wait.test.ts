import { describe, expect, it } from 'vitest';
import { waitFor } from '../src/testing/wait.js';

describe('waitFor', () => {
  it('answers the first value the condition yields, sync or async', async () => {
    let n = 0;
    expect(await waitFor(() => (++n >= 3 ? `after ${n}` : undefined), 'three polls')).toBe('after 3');
    expect(await waitFor(() => Promise.resolve(0), 'a zero')).toBe(0);
  });

  it('keeps polling through undefined, null and false', async () => {
    const seen: unknown[] = [undefined, null, false, 'done'];
    let i = 0;
    expect(await waitFor(() => seen[i++] as string | undefined | null | false, 'the fourth value')).toBe('done');
    expect(i).toBe(4);
  });

  it('a timeout names what was awaited', async () => {
    await expect(waitFor(() => false, 'the door to open', 50)).rejects.toThrow('waiting for the door to open');
  });
});
