import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';

// The workspace dependency rule (docs/architecture.md "Parts and packages"): the wire contract depends on
// no other workspace, each part depends on the contract alone, and only the demo wires the parts together.
// A lock simulator that imported the gateway could pass its tests against the very code it is meant to check.
const RULES: Readonly<Record<string, readonly string[] | 'any'>> = {
  '@tobira/shared': [],
  // stripe-local is the cloud's test double for Stripe (tests only; production talks to Stripe)
  '@tobira/cloud': ['@tobira/shared', '@tobira/stripe-local'],
  '@tobira/gateway': ['@tobira/shared'],
  '@tobira/firmware-sim': ['@tobira/shared'],
  '@tobira/stripe-local': ['@tobira/shared'],
  '@tobira/demo': 'any',
};

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const DEP_FIELDS = ['dependencies', 'devDependencies', 'peerDependencies', 'optionalDependencies'] as const;
const CODE = /\.(?:[cm]?ts|[cm]?js)$/;

interface Workspace {
  name: string;
  folder: string;
  manifest: Partial<Record<(typeof DEP_FIELDS)[number], Record<string, string>>>;
}

function readJson(file: string): unknown {
  return JSON.parse(readFileSync(file, 'utf8'));
}

function workspaces(): Workspace[] {
  const { workspaces: folders } = readJson(join(ROOT, 'package.json')) as { workspaces: string[] };
  return folders.map((folder) => {
    const manifest = readJson(join(ROOT, folder, 'package.json')) as Workspace['manifest'] & { name: string };
    return { name: manifest.name, folder, manifest };
  });
}

function codeFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    if (e.name === 'node_modules' || e.name.startsWith('.')) return [];
    const path = join(dir, e.name);
    if (e.isDirectory()) return codeFiles(path);
    return CODE.test(e.name) ? [path] : [];
  });
}

/** The workspace (by package name) a module specifier in `file` reaches, or undefined for node: and third-party modules. */
function workspaceOf(specifier: string, file: string, all: readonly Workspace[]): string | undefined {
  const named = all.find((w) => specifier === w.name || specifier.startsWith(`${w.name}/`));
  if (named) return named.name;
  if (!specifier.startsWith('.') && !specifier.startsWith('/')) return undefined;
  const target = relative(ROOT, resolve(dirname(file), specifier));
  const inside = all.find((w) => target === w.folder || target.startsWith(`${w.folder}${sep}`));
  // a relative path out of every workspace (the repo root, scripts/) is a dependency nobody declared
  return inside?.name ?? `(repo root) ${target}`;
}

/**
 * Each way `source` (a file of workspace `self`) reaches a workspace outside `allowed`: static and dynamic
 * imports, re-exports, require() (read with the TypeScript scanner, so comments and strings do not count),
 * and a path into another workspace's src/ or test/ named in the text (a child process started from it).
 */
function foreignReaches(self: Workspace, file: string, source: string, allowed: readonly string[], all: readonly Workspace[]): string[] {
  const where = relative(ROOT, file);
  const found: string[] = [];
  for (const { fileName } of ts.preProcessFile(source, true, true).importedFiles) {
    const reached = workspaceOf(fileName, file, all);
    if (reached !== undefined && reached !== self.name && !allowed.includes(reached))
      found.push(`${where} imports '${fileName}' (${reached})`);
  }
  for (const other of all) {
    if (other.name === self.name || allowed.includes(other.name)) continue;
    const path = new RegExp(`(?:^|[^\\w-])${other.folder.replace(/[-/\\^$*+?.()|[\]{}]/g, '\\$&')}/(?:src|test)/`);
    if (path.test(source)) found.push(`${where} names a file of ${other.folder}/ (${other.name})`);
  }
  return found;
}

describe('the workspace dependency rule', () => {
  const all = workspaces();

  it('states a rule for every workspace in the root package.json', () => {
    expect(all.map((w) => w.name).sort()).toEqual(Object.keys(RULES).sort());
  });

  for (const [name, rule] of Object.entries(RULES)) {
    if (rule === 'any') continue;
    describe(name, () => {
      const self = (): Workspace => {
        const w = all.find((x) => x.name === name);
        if (!w) throw new Error(`no workspace named ${name}`);
        return w;
      };

      it(`declares no workspace dependency but ${rule.length ? rule.join(', ') : 'none'} in its package.json`, () => {
        const { manifest } = self();
        const foreign = (dep: string): boolean => all.some((w) => w.name === dep) && !rule.includes(dep);
        expect(
          DEP_FIELDS.flatMap((field) =>
            Object.keys(manifest[field] ?? {})
              .filter(foreign)
              .map((dep) => `${field}: ${dep}`),
          ),
        ).toEqual([]);
      });

      it(`its source, tests and scripts reach no workspace but ${rule.length ? rule.join(', ') : 'none'}`, () => {
        const w = self();
        const files = codeFiles(join(ROOT, w.folder));
        expect(files.length).toBeGreaterThan(0);
        expect(files.flatMap((f) => foreignReaches(w, f, readFileSync(f, 'utf8'), rule, all))).toEqual([]);
      });
    });
  }

  describe('the check itself (so it cannot pass by finding nothing)', () => {
    const sim = (): Workspace => {
      const w = all.find((x) => x.name === '@tobira/firmware-sim');
      if (!w) throw new Error('no firmware-sim workspace');
      return w;
    };
    const file = join(ROOT, 'firmware-sim', 'src', 'probe.ts');
    // probe paths are assembled so that this file's own text names no other workspace's files
    const into = (folder: string, rest: string): string => [folder, rest].join('/');
    const where = relative(ROOT, file);

    it('finds static, type-only, dynamic, re-exported, required and relative imports of another workspace', () => {
      const source = [
        "import { createGateway } from '@tobira/gateway';",
        "import type { Cloud } from '@tobira/cloud';",
        `export { startAdminApi } from '@tobira/${into('cloud', 'src/index.js')}';`,
        `const demo = await import('../../${into('demo', 'src/main.js')}');`,
        `const g = require('../../${into('gateway', 'src/index.ts')}');`,
        "import '../../scripts/arch-report.js';",
      ].join('\n');
      expect(foreignReaches(sim(), file, source, ['@tobira/shared'], all)).toEqual([
        `${where} imports '@tobira/gateway' (@tobira/gateway)`,
        `${where} imports '@tobira/cloud' (@tobira/cloud)`,
        `${where} imports '@tobira/${into('cloud', 'src/index.js')}' (@tobira/cloud)`,
        `${where} imports '../../${into('demo', 'src/main.js')}' (@tobira/demo)`,
        `${where} imports '../../${into('gateway', 'src/index.ts')}' (@tobira/gateway)`,
        `${where} imports '../../scripts/arch-report.js' ((repo root) ${join('scripts', 'arch-report.js')})`,
        `${where} names a file of cloud/ (@tobira/cloud)`,
        `${where} names a file of gateway/ (@tobira/gateway)`,
        `${where} names a file of demo/ (@tobira/demo)`,
      ]);
    });

    it('finds a child process started from another workspace by path', () => {
      const source = `spawn(process.execPath, ['--import', 'tsx', '${into('gateway', 'src/main.ts')}']);`;
      expect(foreignReaches(sim(), file, source, ['@tobira/shared'], all)).toEqual([`${where} names a file of gateway/ (@tobira/gateway)`]);
    });

    it('lets through the allowed workspace, its own files, node: and third-party modules', () => {
      const source = [
        "import { topics } from '@tobira/shared';",
        "import { startMqttBackend } from '@tobira/shared/testing';",
        "import { startFleet } from './fleet.js';",
        "import { readFileSync } from 'node:fs';",
        "import mqtt from 'mqtt';",
        "// a comment about '@tobira/gateway' is no import",
        "const note = 'see shared/src/topics.ts';",
      ].join('\n');
      expect(foreignReaches(sim(), file, source, ['@tobira/shared'], all)).toEqual([]);
    });
  });
});
