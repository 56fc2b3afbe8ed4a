import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chownSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';

/**
 * A Mosquitto of the test's own, on a free loopback port, with a generated
 * config: for tests that need broker auth and ACLs (the shared broker at
 * TOBIRA_TEST_MQTT_URL allows anonymous clients). Needs the `mosquitto`
 * binary (2.x) and, with `dynsec`, `mosquitto_ctrl` and the dynamic security
 * plugin. The caller stops it (afterAll); stop() kills it and removes its files.
 */
export interface MosquittoOptions {
  /** Extra mosquitto.conf lines (after the listener, `allow_anonymous false` and the plugin lines). */
  readonly config?: string;
  /** Load the dynamic security plugin, initialised with an admin client (`mosquitto_ctrl dynsec init`). */
  readonly dynsec?: { readonly adminUsername?: string; readonly adminPassword?: string } | true;
  /** Path of the plugin (Debian/Ubuntu path by default; TOBIRA_DYNSEC_PLUGIN overrides). */
  readonly pluginPath?: string;
}

export interface TestMosquitto {
  readonly url: string;
  readonly port: number;
  /** The dynsec admin login (when started with `dynsec`). */
  readonly admin: { readonly username: string; readonly password: string } | null;
  /** Stops the broker process (the port and files are kept, so start() brings the same broker back). */
  pause(): Promise<void>;
  /** Starts the broker again after pause(), with the same config and dynsec state. */
  resume(): Promise<void>;
  stop(): Promise<void>;
}

export const DEFAULT_DYNSEC_PLUGIN = '/usr/lib/x86_64-linux-gnu/mosquitto_dynamic_security.so';
const run = promisify(execFile);

async function freePort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  const port = (s.address() as { port: number }).port;
  await new Promise<void>((r) => s.close(() => r()));
  return port;
}

function canConnect(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const c = connect(port, '127.0.0.1');
    c.once('connect', () => {
      c.destroy();
      resolve(true);
    });
    c.once('error', () => resolve(false));
  });
}

/**
 * Mosquitto started as root drops to the `mosquitto` user before it opens the
 * password, ACL, TLS and dynsec files, as a real site's does: the test's
 * folder and files are given to that user, so a test sees what a site sees (a
 * root-owned 0600 file is unreadable) instead of running it as root.
 */
function mosquittoUser(): { uid: number; gid: number } | null {
  if (process.getuid?.() !== 0) return null;
  const line = readFileSync('/etc/passwd', 'utf8')
    .split('\n')
    .find((l) => l.startsWith('mosquitto:'));
  if (line === undefined) throw new Error('running as root and there is no mosquitto user: install Debian mosquitto (npm run pretest)');
  const f = line.split(':');
  return { uid: Number(f[2]), gid: Number(f[3]) };
}

/** Gives `dir` and what is directly in it to Mosquitto's user (when root); returns that user. */
export function giveToMosquitto(dir: string): { uid: number; gid: number } | null {
  const who = mosquittoUser();
  if (who === null) return null;
  chownSync(dir, who.uid, who.gid);
  for (const f of readdirSync(dir)) chownSync(join(dir, f), who.uid, who.gid);
  return who;
}

export async function startMosquitto(opts: MosquittoOptions = {}): Promise<TestMosquitto> {
  const dir = mkdtempSync(join(tmpdir(), 'tobira-mosquitto-'));
  const port = await freePort();
  const lines = [
    `listener ${port} 127.0.0.1`,
    'allow_anonymous false',
    'set_tcp_nodelay true',
    'persistence false',
    'log_dest stderr',
    'log_type error',
    'log_type warning',
  ];
  let admin: TestMosquitto['admin'] = null;
  if (opts.dynsec) {
    const d = opts.dynsec === true ? {} : opts.dynsec;
    admin = { username: d.adminUsername ?? 'admin', password: d.adminPassword ?? randomBytes(24).toString('base64url') };
    const file = join(dir, 'dynamic-security.json');
    await run('mosquitto_ctrl', ['dynsec', 'init', file, admin.username, admin.password]);
    lines.push(`plugin ${opts.pluginPath ?? process.env.TOBIRA_DYNSEC_PLUGIN ?? DEFAULT_DYNSEC_PLUGIN}`, `plugin_opt_config_file ${file}`);
  }
  if (opts.config) lines.push(opts.config);
  const confFile = join(dir, 'mosquitto.conf');
  writeFileSync(confFile, `${lines.join('\n')}\n`);
  giveToMosquitto(dir);

  let child: ChildProcess | null = null;
  let stderr = '';
  const launch = async () => {
    stderr = '';
    const c = spawn('mosquitto', ['-c', confFile], { stdio: ['ignore', 'ignore', 'pipe'] });
    child = c;
    // a test process that dies without its afterAll leaves no broker behind
    const orphan = () => c.kill('SIGKILL');
    process.once('exit', orphan);
    c.once('exit', () => process.off('exit', orphan));
    c.stderr?.on('data', (b: Buffer) => (stderr += b.toString()));
    const exited = new Promise<never>((_, reject) => c.once('exit', (code) => reject(new Error(`mosquitto exited (${code}): ${stderr}`))));
    exited.catch(() => {});
    const deadline = Date.now() + 10_000;
    for (;;) {
      const up = await Promise.race([canConnect(port), exited]);
      if (up) return;
      if (Date.now() > deadline) throw new Error(`mosquitto did not listen on ${port}: ${stderr}`);
      await new Promise((r) => setTimeout(r, 50));
    }
  };
  const kill = async () => {
    const c = child;
    child = null;
    if (!c || c.exitCode !== null) return;
    const gone = new Promise<void>((r) => c.once('exit', () => r()));
    c.kill('SIGTERM');
    await gone;
  };
  try {
    await launch();
  } catch (e) {
    await kill();
    rmSync(dir, { recursive: true, force: true });
    throw e;
  }
  return {
    url: `mqtt://127.0.0.1:${port}`,
    port,
    admin,
    pause: kill,
    resume: launch,
    async stop() {
      await kill();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
