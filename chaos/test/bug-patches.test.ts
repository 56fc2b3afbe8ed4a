import { execFileSync } from 'node:child_process';
import { readdirSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

/**
 * Every re-introduced bug of `--prove-bugs` (chaos/bugs, chaos/money/bugs) must still apply to the tree:
 * a patch that rotted as the code moved on proves nothing, and only the quick proofs run in `npm test`.
 */
const root = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const patches = ['chaos/bugs', 'chaos/money/bugs'].flatMap((d) =>
  readdirSync(join(root, d))
    .filter((f) => f.endsWith('.patch'))
    .map((f) => `${d}/${f}`),
);

describe('the --prove-bugs patches', () => {
  it('are there', () => {
    expect(patches.length).toBeGreaterThanOrEqual(6);
  });
  it.each(patches)('%s applies to the tree as it is', (p) => {
    expect(() => execFileSync('git', ['apply', '--check', p], { cwd: root, stdio: 'pipe' })).not.toThrow();
  });
});
