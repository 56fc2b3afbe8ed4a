import { spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { join } from 'node:path';
import { giveToMosquitto } from '@tobira/shared/testing';

/**
 * The run's own Mosquitto on a fixed free port, with its own config. The
 * injector SIGKILLs it and starts it again with or without persistence: with
 * it, queued QoS 1 messages and persistent sessions survive (saved every
 * second); without it, everything the broker held is lost.
 */
export class Mosquitto {
  #proc: ChildProcess | null = null;
  constructor(
    readonly dir: string,
    readonly port: number,
  ) {
    mkdirSync(dir, { recursive: true });
  }

  get url(): string {
    return `mqtt://127.0.0.1:${this.port}`;
  }

  get running(): boolean {
    return this.#proc !== null && this.#proc.exitCode === null && this.#proc.signalCode === null;
  }

  async start(persistence: boolean): Promise<void> {
    const conf = join(this.dir, 'mosquitto.conf');
    // without persistence nothing of an earlier run may come back later either
    if (!persistence) rmSync(join(this.dir, 'mosquitto.db'), { force: true });
    writeFileSync(
      conf,
      [
        `listener ${this.port} 127.0.0.1`,
        'allow_anonymous true',
        'set_tcp_nodelay true',
        `persistence ${persistence}`,
        `persistence_location ${this.dir}/`,
        'autosave_interval 1',
        'max_queued_messages 10000',
        'log_dest none',
        '',
      ].join('\n'),
    );
    // as root Mosquitto drops to its own user, which must be able to write the persistence file here
    giveToMosquitto(this.dir);
    const p = spawn('mosquitto', ['-c', conf], { stdio: 'ignore' });
    this.#proc = p;
    const orphan = () => p.kill('SIGKILL');
    process.once('exit', orphan);
    p.once('exit', () => process.off('exit', orphan));
    const deadline = Date.now() + 10_000;
    while (!(await canConnect(this.port))) {
      if (!this.running || Date.now() > deadline) throw new Error(`mosquitto did not listen on ${this.port}`);
      await new Promise((r) => setTimeout(r, 50));
    }
  }

  async kill(): Promise<void> {
    const p = this.#proc;
    if (p === null || !this.running) return;
    const gone = new Promise<void>((r) => p.once('exit', () => r()));
    p.kill('SIGKILL');
    await gone;
  }
}

export function canConnect(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const c = connect(port, '127.0.0.1');
    c.once('connect', () => {
      c.destroy();
      resolve(true);
    });
    c.once('error', () => resolve(false));
  });
}
