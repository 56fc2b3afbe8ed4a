import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { connect, createServer, type AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { giveToMosquitto } from '@tobira/shared/testing';

/**
 * The bench's own Mosquitto on a free loopback port, so no other process's
 * traffic shares it, started with the project's recommended broker settings:
 * the same `deploy/mosquitto/conf.d/` the cloud and site brokers include
 * (TCP no-delay, queue limits, session expiry, packet size; the clients set
 * no-delay on their side too, shared `connectMqtt`). On top: the listener,
 * no persistence, no auth — the bench measures the path, not the ACL plugin.
 */
export const TUNING_DIR = fileURLToPath(new URL('../deploy/mosquitto/conf.d', import.meta.url));
export interface BenchBroker {
  readonly url: string;
  stop(): Promise<void>;
}

async function freePort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  const { port } = s.address() as AddressInfo;
  await new Promise<void>((r) => s.close(() => r()));
  return port;
}

const canConnect = (port: number) =>
  new Promise<boolean>((resolve) => {
    const c = connect(port, '127.0.0.1');
    c.once('connect', () => {
      c.destroy();
      resolve(true);
    });
    c.once('error', () => resolve(false));
  });

export async function startBroker(): Promise<BenchBroker> {
  const dir = mkdtempSync(join(tmpdir(), 'tobira-bench-mosquitto-'));
  const port = await freePort();
  const conf = join(dir, 'mosquitto.conf');
  writeFileSync(
    conf,
    [
      `listener ${port} 127.0.0.1`,
      'allow_anonymous true',
      'persistence false',
      'log_dest stderr',
      'log_type error',
      `include_dir ${TUNING_DIR}`,
      '',
    ].join('\n'),
  );
  // as root Mosquitto drops to its own user, as on a real broker host; nothing here is opened after that but the config
  giveToMosquitto(dir);
  const proc = spawn('mosquitto', ['-c', conf], { stdio: ['ignore', 'ignore', 'inherit'] });
  const exited = new Promise<void>((r) => proc.once('exit', () => r()));
  for (let i = 0; !(await canConnect(port)); i++) {
    if (proc.exitCode !== null || i > 100) throw new Error('mosquitto did not start (is the mosquitto 2.x binary installed?)');
    await sleep(50);
  }
  return {
    url: `mqtt://127.0.0.1:${port}`,
    async stop() {
      proc.kill('SIGTERM');
      await exited;
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
