import { spawnSync } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const root = join(dirname(fileURLToPath(import.meta.url)), '../..');

/** Runs npm test's pretest step as a user that cannot install (nobody, when the suite runs as root). */
function runAsNonRoot(env: Record<string, string>) {
  const cmd = [process.execPath, '--import', 'tsx', 'scripts/test-tools.ts'];
  const asRoot = process.getuid?.() === 0;
  const [file, ...args] = asRoot ? ['setpriv', '--reuid=65534', '--regid=65534', '--clear-groups', ...cmd] : cmd;
  return spawnSync(file!, args, { cwd: root, env: { ...process.env, ...env }, encoding: 'utf8' });
}

describe("npm test's pretest step (scripts/test-tools.ts)", () => {
  it('passes quietly when every tool the suite drives is here', () => {
    const r = runAsNonRoot({});
    expect(r.stdout + r.stderr).toBe('');
    expect(r.status).toBe(0);
  });

  it('stops with one line naming the command to run when a tool is missing and it cannot install (never a silent skip)', () => {
    const r = runAsNonRoot({ TOBIRA_CHROMIUM: '/nonexistent/chromium', TOBIRA_DYNSEC_PLUGIN: '/nonexistent/plugin.so' });
    expect(r.status).toBe(1);
    expect(r.stdout.trim().split('\n')).toEqual([
      "[tobira] npm test needs Mosquitto's dynamic-security plugin, chromium: run `sudo apt-get install -y --no-install-recommends mosquitto chromium` (Debian/Ubuntu) and run npm test again",
    ]);
  });
});
