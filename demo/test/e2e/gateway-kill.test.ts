import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { System, backends, expectApplied, waitFor } from './system.js';

const ROOT = fileURLToPath(new URL('../../..', import.meta.url));

/** The gateway daemon as its own process, as it runs on a site box. */
class GatewayProcess {
  #child: ChildProcess | null = null;
  output = '';
  constructor(private readonly configFile: string) {}
  start(): Promise<void> {
    const child = spawn(process.execPath, ['--import', 'tsx', 'gateway/src/main.ts', '--config', this.configFile], {
      cwd: ROOT,
      env: { ...process.env, LOG_LEVEL: 'info' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    this.#child = child;
    return new Promise((resolve, reject) => {
      child.stdout?.on('data', (b: Buffer) => {
        this.output += b.toString();
        if (this.output.includes('tobira-gateway ready')) resolve();
      });
      child.stderr?.on('data', (b: Buffer) => (this.output += b.toString()));
      child.once('exit', (code, signal) => reject(new Error(`gateway exited early (${code ?? signal}): ${this.output.slice(-2000)}`)));
    });
  }
  async kill(signal: NodeJS.Signals = 'SIGKILL'): Promise<void> {
    const child = this.#child;
    if (!child || child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise((r) => child.once('exit', r));
    child.kill(signal);
    await exited;
  }
}

function gatewayKeys(sqlitePath: string): Map<string, { version: number; status: string }> {
  const db = new Database(sqlitePath, { readonly: true });
  try {
    const rows = db.prepare('SELECT key_id, version, status FROM keys').all() as { key_id: string; version: number; status: string }[];
    return new Map(rows.map((r) => [r.key_id, { version: r.version, status: r.status }]));
  } finally {
    db.close();
  }
}

describe.each(backends())('the gateway is killed (SIGKILL) mid-stream of grants and restarted (%s)', (backend) => {
  let sys: System;
  let gw: GatewayProcess;
  beforeAll(async () => {
    sys = await new System(backend, { gatewayInProcess: false }).start();
    gw = new GatewayProcess(sys.gatewayConfigFile);
    await gw.start();
  });
  afterAll(async () => {
    await gw.kill();
    await sys.stop();
  });

  it("ends with the gateway's key set equal to the cloud's", async () => {
    const ids: string[] = [];
    for (let i = 0; i < 24; i++) {
      if (i === 8) await gw.kill('SIGKILL');
      ids.push(expectApplied(await sys.issuePin(String(100000 + i), ['L1']), `issue ${i}`).id);
      if (i % 5 === 4)
        expect((await sys.cloud.revokeKey({ keyId: ids[i - 2] as string, reason: 'credential_lost' })).status).toBe('applied');
    }
    await gw.start();
    const settled = async () => {
      const keys = await Promise.all(ids.map((id) => sys.cloud.getKey(id)));
      return keys.every((k) => k?.status === 'active' || k?.status === 'revoked') && keys;
    };
    const cloudKeys = await waitFor(settled, 'every key to settle (active or revoked) in the cloud', 60_000);
    await gw.kill('SIGTERM');
    const local = gatewayKeys(sys.gatewayConfig.sqlitePath);
    for (const k of cloudKeys) {
      if (!k) throw new Error('missing key');
      const mine = local.get(k.id);
      expect(mine, k.id).toBeDefined();
      expect({ id: k.id, version: mine?.version, active: mine?.status === 'active' }).toEqual({
        id: k.id,
        version: k.version,
        active: k.status === 'active',
      });
    }
    expect(cloudKeys.filter((k) => k?.status === 'revoked')).toHaveLength(4);
  });
});
