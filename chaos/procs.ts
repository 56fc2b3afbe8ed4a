import { spawn, type ChildProcess } from 'node:child_process';
import { createInterface } from 'node:readline';

/**
 * A child process the injector can SIGKILL and start again with the same
 * command and env (a cloud, a gateway, a lock fleet). Its stdout is read
 * line by line; `onLine` sees every line (pino JSON for the services).
 */
export class Child {
  #proc: ChildProcess | null = null;
  #starts = 0;
  #waiters: { pred: (l: string) => boolean; resolve: () => void }[] = [];
  stderr = '';
  /**
   * Told of every exit, a kill of the injector's included (its signal says which), with the end of stderr
   * and whether the process had said it was ready (an exit before is a start that failed).
   */
  onExit: (code: number | null, signal: string | null, stderrTail: string, afterReady: boolean) => void = () => {};

  constructor(
    readonly name: string,
    readonly cmd: string,
    readonly args: readonly string[],
    public env: Record<string, string>,
    readonly onLine: (line: string, child: Child) => void = () => {},
    readonly cwd = process.cwd(),
  ) {}

  get running(): boolean {
    return this.#proc !== null && this.#proc.exitCode === null && this.#proc.signalCode === null;
  }

  get starts(): number {
    return this.#starts;
  }

  get process(): ChildProcess | null {
    return this.#proc;
  }

  /** Starts it and waits for a stdout line matching `ready` (or `timeoutMs`). */
  async start(isReady: (l: string) => boolean, timeoutMs = 30_000): Promise<void> {
    if (this.running) return;
    this.#starts++;
    const p = spawn(this.cmd, [...this.args], {
      env: { ...process.env, ...this.env },
      cwd: this.cwd,
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    this.#proc = p;
    const orphan = () => p.kill('SIGKILL');
    process.once('exit', orphan);
    let ready = false;
    p.once('exit', (code, signal) => {
      process.off('exit', orphan);
      this.onExit(code, signal, this.stderr.slice(-1500), ready);
    });
    p.stderr?.on('data', (b: Buffer) => {
      this.stderr = (this.stderr + b.toString()).slice(-4000);
    });
    p.stdin?.on('error', () => {});
    const rl = createInterface({ input: p.stdout! });
    rl.on('line', (l) => {
      this.onLine(l, this);
      for (const w of [...this.#waiters])
        if (w.pred(l)) {
          this.#waiters = this.#waiters.filter((x) => x !== w);
          w.resolve();
        }
    });
    await this.waitLine(isReady, timeoutMs, p);
    ready = true;
  }

  waitLine(pred: (l: string) => boolean, timeoutMs: number, p = this.#proc): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      const w = { pred, resolve: () => (clearTimeout(timer), resolve()) };
      const timer = setTimeout(() => {
        this.#waiters = this.#waiters.filter((x) => x !== w);
        reject(new Error(`${this.name}: no ready line in ${timeoutMs} ms; stderr: ${this.stderr.slice(-800)}`));
      }, timeoutMs);
      this.#waiters.push(w);
      p?.once('exit', (code, sig) => {
        if (!this.#waiters.includes(w)) return;
        this.#waiters = this.#waiters.filter((x) => x !== w);
        clearTimeout(timer);
        reject(new Error(`${this.name} exited (${code ?? sig}) before it was ready; stderr: ${this.stderr.slice(-800)}`));
      });
    });
  }

  write(line: string): void {
    this.#proc?.stdin?.write(`${line}\n`);
  }

  /** SIGKILL (default) or SIGTERM; resolves when it is gone. */
  async kill(signal: NodeJS.Signals = 'SIGKILL'): Promise<void> {
    const p = this.#proc;
    if (p === null || p.exitCode !== null || p.signalCode !== null) return;
    const gone = new Promise<void>((r) => p.once('exit', () => r()));
    p.kill(signal);
    await gone;
  }
}

/** `node --import tsx <entry>`: the project's own entry points, as `npm run cloud` / `npm run gateway` start them. */
export const tsxArgs = (entry: string, ...rest: string[]): string[] => ['--import', 'tsx', entry, ...rest];
