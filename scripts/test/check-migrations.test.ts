import { execFileSync, spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';

/**
 * `.ci/check-migrations` run on trees of its own (a throwaway git repository
 * with a `main` that landed two migrations and a branch on top): a gap, a
 * repeated number, an edited, a renumbered and a removed landed migration
 * fail it, naming the file; a branch renumbering its own new migration, and
 * an untouched tree, pass.
 */
const SCRIPT = fileURLToPath(new URL('../../.ci/check-migrations', import.meta.url));

describe('.ci/check-migrations', () => {
  const roots: string[] = [];
  afterEach(() => {
    for (const r of roots.splice(0)) rmSync(r, { recursive: true, force: true });
  });

  const git = (cwd: string, ...args: string[]) =>
    execFileSync('git', ['-c', 'user.name=t', '-c', 'user.email=t@t', '-c', 'commit.gpgsign=false', ...args], { cwd, stdio: 'pipe' });
  /** A repository whose `main` landed svc/migrations/0001_a.sql and 0002_b.sql, checked out on branch `work`. */
  const repo = () => {
    const root = mkdtempSync(join(tmpdir(), 'tobira-check-mig-'));
    roots.push(root);
    git(root, 'init', '-q', '-b', 'main');
    mkdirSync(join(root, 'svc/migrations'), { recursive: true });
    writeFileSync(join(root, 'svc/migrations/0001_a.sql'), 'CREATE TABLE a (id int);\n');
    writeFileSync(join(root, 'svc/migrations/0002_b.sql'), 'CREATE TABLE b (id int);\n');
    git(root, 'add', '-A');
    git(root, 'commit', '-q', '-m', 'landed');
    git(root, 'checkout', '-q', '-b', 'work');
    return { root, m: (f: string) => join(root, 'svc/migrations', f) };
  };
  const check = (cwd: string) => {
    const r = spawnSync('bash', [SCRIPT], { cwd, encoding: 'utf8', env: { PATH: process.env.PATH ?? '' } });
    return { status: r.status, out: `${r.stdout}${r.stderr}` };
  };

  it('passes an untouched tree and a branch with a new migration', () => {
    const { root, m } = repo();
    expect(check(root)).toMatchObject({ status: 0 });
    writeFileSync(m('0003_c.sql'), 'CREATE TABLE c (id int);\n');
    git(root, 'add', '-A');
    expect(check(root)).toMatchObject({ status: 0 });
  });

  it('fails a gap and a repeated number', () => {
    const gap = repo();
    writeFileSync(gap.m('0004_d.sql'), 'CREATE TABLE d (id int);\n');
    git(gap.root, 'add', '-A');
    const g = check(gap.root);
    expect(g.status).toBe(1);
    expect(g.out).toContain('expected migration 0003, found 0004_d.sql');

    const dup = repo();
    writeFileSync(dup.m('0002_c.sql'), 'CREATE TABLE c (id int);\n');
    git(dup.root, 'add', '-A');
    const d = check(dup.root);
    expect(d.status).toBe(1);
    expect(d.out).toContain('found 0002_c.sql (a number repeats or is skipped)');
  });

  it('fails a landed migration edited, committed or not', () => {
    const { root, m } = repo();
    writeFileSync(m('0001_a.sql'), 'CREATE TABLE a (id int, x text);\n');
    const r = check(root);
    expect(r.status).toBe(1);
    expect(r.out).toContain('svc/migrations/0001_a.sql: a migration that landed');
    expect(r.out).toContain('was edited');
    git(root, 'commit', '-q', '-am', 'edit');
    expect(check(root).status).toBe(1);
  });

  it('fails a landed migration renumbered (0002 moved to 0003, another 0002 in its place) or removed', () => {
    const { root, m } = repo();
    renameSync(m('0002_b.sql'), m('0003_b.sql'));
    writeFileSync(m('0002_c.sql'), 'CREATE TABLE c (id int);\n');
    git(root, 'add', '-A');
    const r = check(root);
    expect(r.status).toBe(1);
    expect(r.out).toContain('svc/migrations/0002_b.sql: a migration that landed');
    rmSync(m('0002_c.sql'));
    rmSync(m('0003_b.sql'));
    git(root, 'add', '-A');
    const gone = check(root);
    expect(gone.status).toBe(1);
    expect(gone.out).toContain('svc/migrations/0002_b.sql: a migration that landed');
    expect(gone.out).toContain('was removed');
  });

  it('passes a branch renumbering its own new migration (what merges do before landing)', () => {
    const { root, m } = repo();
    writeFileSync(m('0003_mine.sql'), 'CREATE TABLE mine (id int);\n');
    git(root, 'add', '-A');
    git(root, 'commit', '-q', '-m', 'mine');
    renameSync(m('0003_mine.sql'), m('0004_mine.sql'));
    writeFileSync(m('0003_theirs.sql'), 'CREATE TABLE theirs (id int);\n');
    git(root, 'add', '-A');
    expect(check(root)).toMatchObject({ status: 0 });
  });
});
