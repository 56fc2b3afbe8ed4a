import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import Stripe from 'stripe';

const main = fileURLToPath(new URL('../src/main.ts', import.meta.url));

describe('the CLI (stripe-local/src/main.ts)', () => {
  it('starts from env, serves the SDK, and exits 0 on SIGTERM', async () => {
    const child = spawn(process.execPath, ['--import', 'tsx', main], {
      env: {
        ...process.env,
        LOG_LEVEL: 'info',
        STRIPE_LOCAL_PORT: '0',
        STRIPE_SECRET_KEY: 'sk_test_cli_0000000000',
        STRIPE_LOCAL_SEED: 'cli',
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const lines: string[] = [];
    const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
    const ready = new Promise<string>((resolve, reject) => {
      let buf = '';
      child.stdout.on('data', (c: Buffer) => {
        buf += c.toString('utf8');
        for (let i = buf.indexOf('\n'); i >= 0; i = buf.indexOf('\n')) {
          const line = buf.slice(0, i);
          buf = buf.slice(i + 1);
          lines.push(line);
          const rec = JSON.parse(line) as { msg?: string; url?: string };
          if (rec.msg === 'stripe-local ready' && rec.url) resolve(rec.url);
        }
      });
      void exited.then((code) => reject(new Error(`exited early with ${code}`)));
    });
    try {
      const url = new URL(await ready);
      const stripe = new Stripe('sk_test_cli_0000000000', { host: url.hostname, port: url.port, protocol: 'http', maxNetworkRetries: 0 });
      const pi = await stripe.paymentIntents.create({ amount: 1000, currency: 'jpy' });
      expect(pi.id).toMatch(/^pi_cli/);
    } finally {
      child.kill('SIGTERM');
    }
    expect(await exited).toBe(0);
    expect(lines.some((l) => l.includes('"stripe-local closed"'))).toBe(true);
  });
});
