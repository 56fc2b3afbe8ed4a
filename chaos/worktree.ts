import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';

/** The repository the proofs patch: a throwaway worktree of its HEAD gets each patch, so the checkout itself is never touched. */
const REPO = resolve(import.meta.dirname, '..');

/** A worktree of HEAD with its own node_modules: links to ours, except @tobira/* which must point into the worktree. */
export function throwawayWorktree(name: string): string {
  const dir = join(tmpdir(), `tobira-prove-${name}-${process.pid}`);
  rmSync(dir, { recursive: true, force: true });
  execFileSync('git', ['-C', REPO, 'worktree', 'add', '--detach', dir, 'HEAD'], { stdio: 'ignore' });
  const nm = join(dir, 'node_modules');
  mkdirSync(nm);
  for (const e of readdirSync(join(REPO, 'node_modules'))) {
    if (e === '@tobira') continue;
    symlinkSync(join(REPO, 'node_modules', e), join(nm, e));
  }
  mkdirSync(join(nm, '@tobira'));
  for (const e of readdirSync(join(REPO, 'node_modules', '@tobira'))) symlinkSync(join('..', '..', e), join(nm, '@tobira', e));
  for (const w of ['shared', 'cloud', 'gateway', 'firmware-sim', 'demo', 'stripe-local'])
    if (existsSync(join(REPO, w, 'node_modules'))) symlinkSync(join(REPO, w, 'node_modules'), join(dir, w, 'node_modules'));
  return dir;
}

export function removeWorktree(dir: string): void {
  try {
    execFileSync('git', ['-C', REPO, 'worktree', 'remove', '--force', dir], { stdio: 'ignore' });
  } catch {
    rmSync(dir, { recursive: true, force: true });
    execFileSync('git', ['-C', REPO, 'worktree', 'prune'], { stdio: 'ignore' });
  }
}
