import { describe, expect, it } from 'vitest';
import { SignInThrottle } from '../src/http/sign-in-throttle.js';

/**
 * The throttle as the sign-in route drives it: `waitFor`, then `attempt` before any await, then `refund`
 * when the Argon2 queue shed the try (it was never evaluated). A shed try gives back its count and its
 * time, so a guesser whose tries are shed cannot keep a penalty alive or a table full for free.
 */
describe('sign-in throttle: tries the Argon2 queue shed', () => {
  const WINDOW = 15 * 60_000;

  it('do not keep a penalised pair alive: the full table takes a new pair once the window after its last evaluated failure ends', () => {
    let now = 0;
    const t = new SignInThrottle(() => now, { maxEntries: 1 });
    for (let i = 0; i < 3; i++) expect(t.attempt('10.0.0.9', 'boss')).toBe(0); // three wrong passwords, evaluated
    // the table (one entry) is full of a live penalty: a new pair is refused
    now = 1_000;
    expect(t.attempt('10.0.0.1', 'boss')).toBeGreaterThan(0);
    // the guesser keeps trying just before the window ends; the queue sheds each try
    for (now = 60_000; now < WINDOW; now += 60_000) {
      if (t.waitFor('10.0.0.9', 'boss') > 0) continue;
      expect(t.attempt('10.0.0.9', 'boss')).toBe(0);
      t.refund('10.0.0.9', 'boss');
    }
    now = WINDOW + 1;
    expect(t.attempt('10.0.0.1', 'boss')).toBe(0);
  });

  it("do not restart a name's per-name wait", () => {
    let now = 0;
    const t = new SignInThrottle(() => now, { perAccountMax: 2, perAccountDelayMs: 10_000, free: 100, perAddressMax: 100 });
    expect(t.attempt('10.0.0.1', 'boss')).toBe(0);
    expect(t.attempt('10.0.0.2', 'boss')).toBe(0);
    now = 10_000;
    expect(t.waitFor('10.0.0.3', 'boss')).toBe(0); // the name's wait ran out
    // a guess the queue sheds
    expect(t.attempt('10.0.0.4', 'boss')).toBe(0);
    t.refund('10.0.0.4', 'boss');
    expect(t.waitFor('10.0.0.3', 'boss')).toBe(0);
  });
});
