import { chmodSync, existsSync, statSync } from 'node:fs';
import type { Logger } from '@tobira/shared';

/**
 * Files at rest only their owner reads (no secret in clear): the data folder 0700;
 * the database with its -wal/-shm, the key pair file, the TLS keys and the
 * config 0600. Checked at every start, before anything secret is read: a
 * looser mode is tightened with a warning naming the file; a mode that
 * cannot be tightened (a file of another user) stops the start with
 * GATEWAY_FILE_MODE, since the secrets in it are readable as it stands.
 */
export class FileModeError extends Error {
  readonly code = 'GATEWAY_FILE_MODE';
  constructor(
    readonly file: string,
    message: string,
  ) {
    super(message);
    this.name = 'FileModeError';
  }
}

export interface ModeCheck {
  readonly path: string;
  /** The mode it must have at most: 0o700 for a folder, 0o600 for a file. */
  readonly mode: 0o700 | 0o600;
}

/** Tightens each existing path to `mode` (bits beyond it removed); returns the paths it changed. Missing paths are skipped. `chmod`: a seam for the refusal test (root can chmod anything). */
export function enforceModes(checks: readonly ModeCheck[], log: Logger, chmod: (path: string, mode: number) => void = chmodSync): string[] {
  const fixed: string[] = [];
  for (const c of checks) {
    if (!existsSync(c.path)) continue;
    const have = statSync(c.path).mode & 0o777;
    if ((have & ~c.mode) === 0) continue;
    const want = have & c.mode;
    try {
      chmod(c.path, want);
    } catch (e) {
      throw new FileModeError(
        c.path,
        `${c.path} has mode ${have.toString(8)} and cannot be set to ${want.toString(8)} (${String(e)}); fix it by hand`,
      );
    }
    log.warn(
      { code: 'GATEWAY_FILE_MODE', file: c.path, was: have.toString(8), now: want.toString(8) },
      'file readable beyond its owner: mode tightened',
    );
    fixed.push(c.path);
  }
  return fixed;
}
