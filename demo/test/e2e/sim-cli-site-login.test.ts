import { spawn } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { siteBrokerHooks } from '@tobira/gateway';
import {
  connectMqtt,
  createLogger,
  encodeSecret,
  filters,
  gatewaySiteClientId,
  newPairingSecret,
  startEmbeddedBroker,
  topics,
  waitConnected,
} from '@tobira/shared';
import { describe, expect, it } from 'vitest';

// The simulator's CLI against the gateway's site-broker hooks: it needs @tobira/gateway, so it lives here
// and not in firmware-sim/test/, which may reach only @tobira/shared.
const root = resolve(fileURLToPath(import.meta.url), '../../../..');
const cli = join(root, 'firmware-sim/src/cli.ts');

describe('the CLI against a site broker with lock logins (aedes with the gateway hooks)', () => {
  /** Runs the CLI until it is ready (resolves its output) or exits (resolves its exit code and output). */
  async function runCli(
    args: readonly string[],
  ): Promise<{ ready: boolean; code: number | null; stdout: string; stop(): Promise<number | null> }> {
    const child = spawn(process.execPath, ['--import', 'tsx', cli, ...args], {
      cwd: root,
      env: { ...process.env, LOG_LEVEL: 'silent' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    const exited = new Promise<number | null>((r) => child.on('exit', (code) => r(code)));
    const ready = await new Promise<boolean>((r) => {
      child.stdout.on('data', (d: Buffer) => {
        stdout += d.toString();
        if (stdout.includes('ready:')) r(true);
      });
      child.stderr.on('data', (d: Buffer) => (stdout += d.toString()));
      void exited.then(() => r(false));
    });
    return {
      ready,
      code: ready ? null : await exited,
      stdout,
      async stop() {
        child.kill('SIGTERM');
        return exited;
      },
    };
  }

  it('logs every lock in with its own login with --site-login, and is refused without it', async () => {
    const gatewayId = 'gw-cli-login';
    const secret = newPairingSecret();
    const dir = mkdtempSync(join(tmpdir(), 'tobira-sim-'));
    const secretsFile = join(dir, 'secrets.json');
    writeFileSync(secretsFile, JSON.stringify({ L1: encodeSecret(secret) }));
    const site = { username: 'gw.gw-cli-login', password: 'gateway-site-password' };
    const broker = await startEmbeddedBroker({
      aedes: siteBrokerHooks(
        { gatewayId, locks: [{ lockId: 'L1', pairingSecret: encodeSecret(secret) }], site },
        createLogger('site-broker'),
      ),
    });
    try {
      const anonymous = await runCli(['-g', gatewayId, '--lock-ids', 'L1', '--mqtt', broker.url, '--secrets', secretsFile]);
      expect(anonymous.ready, anonymous.stdout).toBe(false);
      expect(anonymous.code).toBe(1);
      expect(anonymous.stdout).toContain('could not start');
      const loggedIn = await runCli(['-g', gatewayId, '--lock-ids', 'L1', '--mqtt', broker.url, '--secrets', secretsFile, '--site-login']);
      expect(loggedIn.ready, loggedIn.stdout).toBe(true);
      // what the gateway (with its own site login) hears: L1's retained state, published under L1's login
      const gw = connectMqtt(broker.url, {
        username: site.username,
        password: site.password,
        clientId: gatewaySiteClientId(gatewayId),
        clean: true,
      });
      try {
        await waitConnected(gw);
        const state = new Promise<string>((r) =>
          gw.on('message', (t, payload) => t === topics.lock(gatewayId, 'L1', 'state') && r(payload.toString())),
        );
        await gw.subscribeAsync(filters.locksOf(gatewayId, 'state'), { qos: 1 });
        expect(JSON.parse(await state)).toMatchObject({ lockId: 'L1', bolt: 'locked' });
      } finally {
        await gw.endAsync(true);
      }
      expect(await loggedIn.stop()).toBe(0);
    } finally {
      await broker.stop();
    }
  });
});
