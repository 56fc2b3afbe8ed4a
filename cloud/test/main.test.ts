import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { generateSigningKeyPair } from '@tobira/shared';
import { describe, expect, it } from 'vitest';

const MAIN = fileURLToPath(new URL('../src/main.ts', import.meta.url));

/**
 * `npm run cloud` (cloud/src/main.ts) as an operator starts it, in a child
 * process. Only refusals are run here: they end before anything is opened.
 * A cloud that does start would keep running, so the wait is bounded and a
 * child still alive then is killed and counts as "did not refuse".
 */
async function run(env: Record<string, string>): Promise<{ code: number | null; lines: Record<string, unknown>[]; stderr: string }> {
  const child = spawn(process.execPath, ['--import', 'tsx', MAIN], {
    // no CLOUD_SIGNING_JWK from the caller's environment; nowhere to connect to, had it started
    env: { PATH: process.env.PATH ?? '', LOG_LEVEL: 'info', ADMIN_API_PORT: '0', MQTT_URL: 'mqtt://127.0.0.1:1', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (b: Buffer) => (stdout += b.toString()));
  child.stderr.on('data', (b: Buffer) => (stderr += b.toString()));
  const code = await new Promise<number | null>((resolve) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      resolve(null);
    }, 30_000);
    child.once('exit', (c) => {
      clearTimeout(timer);
      resolve(c);
    });
  });
  const lines = stdout
    .split('\n')
    .filter((l) => l.startsWith('{'))
    .map((l) => JSON.parse(l) as Record<string, unknown>);
  return { code, lines, stderr };
}

describe('starting the cloud (cloud/src/main.ts)', () => {
  it(
    'without CLOUD_SIGNING_JWK it refuses to start: exit 1 and one JSON log line with the code, the variable and a cid',
    { timeout: 60_000 },
    async () => {
      const r = await run({});
      expect(r.code, r.stderr).toBe(1);
      const refusal = r.lines.find((l) => l.code === 'SIGNING_KEY_REQUIRED');
      expect(refusal, JSON.stringify(r.lines)).toMatchObject({
        variable: 'CLOUD_SIGNING_JWK',
        msg: 'configuration refused; not starting',
        cid: expect.any(String),
      });
      expect(r.lines.map((l) => l.msg)).not.toContain('cloud started');
    },
  );

  it(
    'with a CLOUD_SIGNING_JWK that is not a private key it refuses with SIGNING_KEY_INVALID, without printing the value',
    { timeout: 60_000 },
    async () => {
      const { publicJwk } = await generateSigningKeyPair();
      const r = await run({ CLOUD_SIGNING_JWK: JSON.stringify(publicJwk) });
      expect(r.code, r.stderr).toBe(1);
      expect(
        r.lines.find((l) => l.code === 'SIGNING_KEY_INVALID'),
        JSON.stringify(r.lines),
      ).toMatchObject({ variable: 'CLOUD_SIGNING_JWK', cid: expect.any(String) });
      expect(JSON.stringify(r.lines) + r.stderr).not.toContain(String(publicJwk.x));
    },
  );

  it(
    'with its signing key but without TOBIRA_KEK it refuses to start with KEK_REQUIRED: there is no default key-encryption key',
    { timeout: 60_000 },
    async () => {
      const { privateJwk } = await generateSigningKeyPair();
      const r = await run({ CLOUD_SIGNING_JWK: JSON.stringify(privateJwk) });
      expect(r.code, r.stderr).toBe(1);
      expect(
        r.lines.find((l) => l.code === 'KEK_REQUIRED'),
        JSON.stringify(r.lines),
      ).toMatchObject({ variable: 'TOBIRA_KEK', msg: 'configuration refused; not starting', cid: expect.any(String) });
      expect(r.lines.map((l) => l.msg)).not.toContain('cloud started');
    },
  );

  it('with a TOBIRA_KEK that is not 32 bytes it refuses with KEK_INVALID, without printing the value', { timeout: 60_000 }, async () => {
    const { privateJwk } = await generateSigningKeyPair();
    const short = Buffer.alloc(16, 0x41).toString('base64');
    const r = await run({ CLOUD_SIGNING_JWK: JSON.stringify(privateJwk), TOBIRA_KEK: short });
    expect(r.code, r.stderr).toBe(1);
    expect(
      r.lines.find((l) => l.code === 'KEK_INVALID'),
      JSON.stringify(r.lines),
    ).toMatchObject({ variable: 'TOBIRA_KEK', cid: expect.any(String) });
    expect(JSON.stringify(r.lines) + r.stderr).not.toContain(short);
  });
});
