import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { connect, createServer, type AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';

/**
 * The bench's own Mosquitto on a free loopback port, so no other process's
 * traffic shares it. TCP no-delay on the broker side (`set_tcp_nodelay`);
 * the clients set it on theirs (shared `connectMqtt`). No persistence, no
 * auth: the bench measures the path, not the ACL plugin.
 */
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
      ...(process.getuid?.() === 0 ? ['user root'] : []),
      'allow_anonymous true',
      'set_tcp_nodelay true',
      'persistence false',
      'max_queued_messages 100000',
      'log_dest stderr',
      'log_type error',
      '',
    ].join('\n'),
  );
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
