import { statfs } from 'node:fs/promises';
import type { Logger } from '@tobira/shared';

/** Port: free bytes (for an unprivileged process) on the file system holding `dir`. Tests inject their own. */
export type FreeSpaceReader = (dir: string) => Promise<number>;

export const statfsFreeBytes: FreeSpaceReader = async (dir) => {
  const s = await statfs(dir);
  return s.bavail * s.bsize;
};

export interface StorageStatus {
  /** Below the headroom: ordinary keys are denied STORAGE_FULL (only offline-capable staff keys open). */
  readonly low: boolean;
  /** Last reading; null before the first one succeeded. */
  readonly freeBytes: number | null;
  readonly minFreeBytes: number;
  /** Trusted time of the last successful reading. */
  readonly checkedAt: number | null;
}

/**
 * The disk-headroom check of the data folder. Decisions read the cached
 * verdict (`low`), never the disk: `check()` runs at start and on a timer.
 * Below `minFreeBytes` a decision might not be recorded, and an unrecorded
 * unlock breaks DESIGN I2, so ordinary keys are refused until space is back;
 * the headroom left is kept for what must still be written (staff-key
 * decisions, denials, alarms, acks). A failed reading keeps the last verdict
 * (logged DISK_CHECK_FAILED): a transient error must not open or shut every
 * door, and a truly full disk fails the write transaction, which fails closed.
 */
export class StorageGuard {
  #low = false;
  #freeBytes: number | null = null;
  #checkedAt: number | null = null;

  constructor(
    private readonly dir: string,
    private readonly minFreeBytes: number,
    private readonly read: FreeSpaceReader,
    private readonly log: Logger,
    private readonly now: () => number,
  ) {}

  get low(): boolean {
    return this.#low;
  }

  status(): StorageStatus {
    return { low: this.#low, freeBytes: this.#freeBytes, minFreeBytes: this.minFreeBytes, checkedAt: this.#checkedAt };
  }

  /** Reads the free space once and updates the verdict; logs each change (DISK_LOW / DISK_OK). */
  async check(): Promise<StorageStatus> {
    let free: number;
    try {
      free = await this.read(this.dir);
    } catch (e) {
      this.log.warn(
        { code: 'DISK_CHECK_FAILED', dir: this.dir, err: e instanceof Error ? e.message : String(e), low: this.#low },
        'free disk space could not be read; keeping the last verdict',
      );
      return this.status();
    }
    const low = free < this.minFreeBytes;
    this.#freeBytes = free;
    this.#checkedAt = this.now();
    if (low !== this.#low) {
      this.#low = low;
      if (low)
        this.log.error(
          { code: 'DISK_LOW', dir: this.dir, freeBytes: free, minFreeBytes: this.minFreeBytes },
          'free disk space below the headroom: ordinary keys are refused (STORAGE_FULL) until space is freed',
        );
      else
        this.log.warn(
          { code: 'DISK_OK', dir: this.dir, freeBytes: free, minFreeBytes: this.minFreeBytes },
          'free disk space back above the headroom: decisions are normal again',
        );
    }
    return this.status();
  }
}
