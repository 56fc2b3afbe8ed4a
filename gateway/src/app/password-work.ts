import { hash, verify } from '@node-rs/argon2';

/**
 * The Argon2 work the whole process does at once. Each hash or verify takes
 * 19 MiB and tens of milliseconds of one core; the gateway box also decides
 * at the doors, so a flood of sign-ins (to any name, known or not) must not
 * take every core. At most `concurrency` run at once; anything that cannot
 * wait is shed at once (`busy`), without any Argon2 work, and the caller
 * answers 503 SIGN_IN_BUSY. The slot is taken synchronously, so a burst that
 * arrives in one tick is bounded too.
 *
 * Waiting is in two lanes so that a flood cannot lock staff out:
 * - the priority lane (at most `priorityQueue` in all, at most
 *   `priorityPerSource` for one requester, served first, round robin over
 *   requesters): someone already trusted — a signed-in session, the setup,
 *   or a sign-in to an account from an address it signed in from before. Its
 *   requester is the account (a session's work, a known-address sign-in) or
 *   the address (setup), so a trusted person flooding with their own right
 *   password holds only their own share and cannot keep another account's
 *   trusted sign-in out;
 * - the shared lane (at most `queue` in all, at most `perSource` from one
 *   address, served round robin over addresses): everyone else. One address
 *   flooding fills only its own share; a new address still gets a turn.
 */
export interface PasswordWorkLimits {
  readonly concurrency: number;
  readonly queue: number;
  readonly perSource: number;
  readonly priorityQueue: number;
  readonly priorityPerSource: number;
}
export const DEFAULT_PASSWORD_WORK: PasswordWorkLimits = Object.freeze({
  concurrency: 2,
  queue: 16,
  perSource: 2,
  priorityQueue: 8,
  priorityPerSource: 2,
});

/**
 * Who asks for the work: whose share of its lane it takes (the address in
 * the shared lane; the account or address in the priority lane), and
 * whether it goes in the priority lane.
 */
export interface Requester {
  readonly source: string;
  readonly priority: boolean;
}
/** Work nobody in particular asked for (tests, tools): one shared source. */
export const NOBODY: Requester = Object.freeze({ source: '', priority: false });

/** Limits as configured: any field left out (or undefined) takes its default. */
export type PasswordWorkConfig = { readonly [K in keyof PasswordWorkLimits]?: number | undefined };

// algorithm 2 = Argon2id (a const enum in the typings, which verbatimModuleSyntax cannot import; it is also the default)
const ARGON2 = { algorithm: 2, memoryCost: 19_456, timeCost: 2, parallelism: 1 } as const;

/**
 * What an unknown username is verified against, so it costs one Argon2
 * verify with the same parameters as a real account's: made once with a
 * random password nobody knows (the answer for an unknown name is refused
 * whatever this verify says).
 */
const DUMMY_HASH = '$argon2id$v=19$m=19456,t=2,p=1$34Way4ntlqSbRTFaXxIpAw$MWBvtu5HWNtECLq05nAMTDTKzAxz7gQN3+fPm+br/+0';

export type Shed = { readonly busy: true };
const SHED: Shed = Object.freeze({ busy: true });

/** One lane's waiters: each source's queue; Map order is the round-robin order (a served source moves to the back). */
class Lane {
  readonly #q = new Map<string, (() => void)[]>();
  #waiting = 0;

  constructor(
    readonly max: number,
    readonly perSource: number,
  ) {}

  get waiting(): number {
    return this.#waiting;
  }

  admits(source: string): boolean {
    return this.#waiting < this.max && (this.#q.get(source)?.length ?? 0) < Math.min(this.perSource, this.max);
  }

  push(source: string, w: () => void): void {
    const q = this.#q.get(source);
    if (q === undefined) this.#q.set(source, [w]);
    else q.push(w);
    this.#waiting += 1;
  }

  /** The next source's first waiter; that source goes to the back of the round. */
  shift(): (() => void) | undefined {
    for (const [source, q] of this.#q) {
      const w = q.shift();
      this.#q.delete(source);
      if (w === undefined) continue;
      this.#waiting -= 1;
      if (q.length > 0) this.#q.set(source, q);
      return w;
    }
    return undefined;
  }
}

export class PasswordWork {
  readonly #l: PasswordWorkLimits;
  #running = 0;
  readonly #priority: Lane;
  readonly #shared: Lane;
  #shed = 0;
  #runs = 0;
  #highWater = 0;

  constructor(l: PasswordWorkConfig = {}) {
    const d = DEFAULT_PASSWORD_WORK;
    this.#l = {
      concurrency: l.concurrency ?? d.concurrency,
      queue: l.queue ?? d.queue,
      perSource: l.perSource ?? d.perSource,
      priorityQueue: l.priorityQueue ?? d.priorityQueue,
      priorityPerSource: l.priorityPerSource ?? d.priorityPerSource,
    };
    this.#priority = new Lane(this.#l.priorityQueue, this.#l.priorityPerSource);
    this.#shared = new Lane(this.#l.queue, this.#l.perSource);
  }

  /** Argon2id PHC string of `password`, or shed. */
  hash(password: string, who: Requester = NOBODY): Promise<string | Shed> {
    return this.#run(who, () => hash(password, ARGON2));
  }

  /** Whether `password` matches `phc` (null: an unknown account, verified against the dummy at the same cost); or shed. */
  verify(phc: string | null, password: string, who: Requester = NOBODY): Promise<boolean | Shed> {
    return this.#run(who, () => verify(phc ?? DUMMY_HASH, password).catch(() => false));
  }

  /**
   * Whether work for `who` would run or wait now rather than be shed. The
   * routes ask before they count a try, so a shed try touches no counter.
   */
  admits(who: Requester): boolean {
    if (this.#running < this.#l.concurrency) return true;
    return (who.priority ? this.#priority : this.#shared).admits(who.source);
  }

  /** As `admits`, and a refusal counts as shed (the caller answers busy without asking for the work). */
  admitOrShed(who: Requester): boolean {
    if (this.admits(who)) return true;
    this.#shed += 1;
    return false;
  }

  /** Jobs run and shed so far, and the most that ever ran at once (tests; what a flood cost). */
  get stats(): {
    readonly runs: number;
    readonly shed: number;
    readonly highWater: number;
    readonly running: number;
    readonly waiting: number;
  } {
    return {
      runs: this.#runs,
      shed: this.#shed,
      highWater: this.#highWater,
      running: this.#running,
      waiting: this.#priority.waiting + this.#shared.waiting,
    };
  }

  /** The next waiter: the priority lane's next source in turn, then the shared lane's. */
  #next(): (() => void) | undefined {
    return this.#priority.shift() ?? this.#shared.shift();
  }

  #run<T>(who: Requester, work: () => Promise<T>): Promise<T | Shed> {
    if (!this.admits(who)) {
      this.#shed += 1;
      return Promise.resolve(SHED);
    }
    // A finished job hands its slot straight to the next waiter, so `running` never passes `concurrency`.
    const go = async (): Promise<T> => {
      this.#runs += 1;
      try {
        return await work();
      } finally {
        const next = this.#next();
        if (next === undefined) this.#running -= 1;
        else next();
      }
    };
    if (this.#running < this.#l.concurrency) {
      this.#running += 1;
      this.#highWater = Math.max(this.#highWater, this.#running);
      return go();
    }
    return new Promise<void>((resolve) => (who.priority ? this.#priority : this.#shared).push(who.source, resolve)).then(go);
  }
}

export const isShed = (x: unknown): x is Shed => typeof x === 'object' && x !== null && 'busy' in x && x.busy === true;
