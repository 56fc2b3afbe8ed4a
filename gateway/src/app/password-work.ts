import { hash, verify } from '@node-rs/argon2';

/**
 * The Argon2 work the whole process does at once. Each hash or verify takes
 * 19 MiB and tens of milliseconds of one core; the gateway box also decides
 * at the doors, so a flood of sign-ins (to any name, known or not) must not
 * take every core. At most `concurrency` run at once, at most `queue` wait
 * for a turn; anything beyond is shed at once (`busy`), without any Argon2
 * work, and the caller answers 503 SIGN_IN_BUSY. The slot is taken
 * synchronously, so a burst that arrives in one tick is bounded too.
 */
export interface PasswordWorkLimits {
  readonly concurrency: number;
  readonly queue: number;
}
export const DEFAULT_PASSWORD_WORK: PasswordWorkLimits = Object.freeze({ concurrency: 2, queue: 16 });

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

export class PasswordWork {
  readonly #l: PasswordWorkLimits;
  #running = 0;
  readonly #waiting: (() => void)[] = [];
  #shed = 0;
  #runs = 0;
  #highWater = 0;

  constructor(l: Partial<PasswordWorkLimits> = {}) {
    this.#l = { ...DEFAULT_PASSWORD_WORK, ...l };
  }

  /** Argon2id PHC string of `password`, or shed. */
  hash(password: string): Promise<string | Shed> {
    return this.#run(() => hash(password, ARGON2));
  }

  /** Whether `password` matches `phc` (null: an unknown account, verified against the dummy at the same cost); or shed. */
  verify(phc: string | null, password: string): Promise<boolean | Shed> {
    return this.#run(() => verify(phc ?? DUMMY_HASH, password).catch(() => false));
  }

  /** Jobs run and shed so far, and the most that ever ran at once (tests; what a flood cost). */
  get stats(): {
    readonly runs: number;
    readonly shed: number;
    readonly highWater: number;
    readonly running: number;
    readonly waiting: number;
  } {
    return { runs: this.#runs, shed: this.#shed, highWater: this.#highWater, running: this.#running, waiting: this.#waiting.length };
  }

  #run<T>(work: () => Promise<T>): Promise<T | Shed> {
    if (this.#running >= this.#l.concurrency && this.#waiting.length >= this.#l.queue) {
      this.#shed += 1;
      return Promise.resolve(SHED);
    }
    // A finished job hands its slot straight to the next waiter, so `running` never passes `concurrency`.
    const go = async (): Promise<T> => {
      this.#runs += 1;
      try {
        return await work();
      } finally {
        const next = this.#waiting.shift();
        if (next === undefined) this.#running -= 1;
        else next();
      }
    };
    if (this.#running < this.#l.concurrency) {
      this.#running += 1;
      this.#highWater = Math.max(this.#highWater, this.#running);
      return go();
    }
    return new Promise<void>((resolve) => this.#waiting.push(resolve)).then(go);
  }
}

export const isShed = (x: unknown): x is Shed => typeof x === 'object' && x !== null && 'busy' in x && x.busy === true;
