import { describe, expect, it } from 'vitest';
import { BUGS, proveBug } from '../prove-bugs.js';

/**
 * The quick form of `npm run chaos -- --prove-bugs` inside `npm test`: each known fail-open bug,
 * re-introduced in a throwaway worktree, run through its targeted scenario (one seed) must be
 * reported by the checker. A checker change that stops seeing one of them fails the build.
 * Needs what chaos-short.test.ts needs (PostgreSQL, the `mosquitto` binary).
 */
describe('npm run chaos -- --prove-bugs (quick)', () => {
  for (const b of BUGS)
    it(`reports ${b.patch} (${b.scenario}, seed ${b.seeds[0]})`, async () => {
      const lines: string[] = [];
      const r = await proveBug(b, (s) => lines.push(s), b.seeds.slice(0, 1));
      expect(r.caught, lines.join('\n')).toBe(true);
      expect(r.violations.length).toBeGreaterThan(0);
    }, 600_000);
});
