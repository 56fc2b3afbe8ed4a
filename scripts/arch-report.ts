// Architecture report: type casts in source, SQL outside adapters/, and
// relative-import cycles. `node --import tsx scripts/arch-report.ts` prints it;
// shared/test/architecture.test.ts holds the lines it reports on.
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import ts from 'typescript';

export const SOURCE_ROOTS = ['shared/src', 'cloud/src', 'gateway/src', 'firmware-sim/src', 'demo/src', 'stripe-local/src'];

export function sourceFiles(root: string, repo: string): string[] {
  const dir = join(repo, root);
  let entries: string[];
  try {
    entries = readdirSync(dir);
  } catch {
    return [];
  }
  const out: string[] = [];
  for (const name of entries) {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) out.push(...sourceFiles(relative(repo, path), repo));
    else if (name.endsWith('.ts') && !name.endsWith('.d.ts')) out.push(relative(repo, path));
  }
  return out.sort();
}

/** `x as T` (not `as const`) and `<T>x`, counted on the syntax tree, per file. */
export function castsIn(text: string, fileName = 'x.ts'): number {
  const file = ts.createSourceFile(fileName, text, ts.ScriptTarget.Latest, false, ts.ScriptKind.TS);
  let n = 0;
  const visit = (node: ts.Node): void => {
    if (ts.isAsExpression(node)) {
      const t = node.type;
      const isConst = ts.isTypeReferenceNode(t) && ts.isIdentifier(t.typeName) && t.typeName.text === 'const';
      if (!isConst) n += 1;
    } else if (ts.isTypeAssertionExpression(node)) n += 1;
    ts.forEachChild(node, visit);
  };
  visit(file);
  return n;
}

const SQL = /\b(SELECT\s[\s\S]*?\sFROM|INSERT\s+INTO|UPDATE\s+[a-z_]+\s+SET|DELETE\s+FROM|ON\s+CONFLICT)\b/;

/** Files outside any `adapters/` folder whose string literals hold SQL. */
export function sqlOutsideAdapters(repo: string): string[] {
  const hits: string[] = [];
  for (const root of SOURCE_ROOTS) {
    for (const f of sourceFiles(root, repo)) {
      if (f.includes('/adapters/')) continue;
      const file = ts.createSourceFile(f, readFileSync(join(repo, f), 'utf8'), ts.ScriptTarget.Latest, false, ts.ScriptKind.TS);
      let found = false;
      const visit = (node: ts.Node): void => {
        if (found) return;
        if (
          ts.isStringLiteral(node) ||
          ts.isNoSubstitutionTemplateLiteral(node) ||
          ts.isTemplateHead(node) ||
          ts.isTemplateMiddle(node) ||
          ts.isTemplateTail(node)
        ) {
          if (SQL.test(node.text)) found = true;
        }
        ts.forEachChild(node, visit);
      };
      visit(file);
      if (found) hits.push(f);
    }
  }
  return hits;
}

/** Cycles among relative imports (type-only imports included: they still couple modules). */
export function importCycles(repo: string): string[][] {
  const graph = new Map<string, string[]>();
  for (const root of SOURCE_ROOTS) {
    for (const f of sourceFiles(root, repo)) {
      const text = readFileSync(join(repo, f), 'utf8');
      const deps: string[] = [];
      for (const m of text.matchAll(/(?:^|\n)\s*(?:import|export)\b[^'"]*?from\s+['"](\.{1,2}\/[^'"]+)['"]/g)) {
        const spec = m[1]!.replace(/\.js$/, '.ts');
        deps.push(relative(repo, resolve(join(repo, dirname(f)), spec.endsWith('.ts') ? spec : `${spec}.ts`)));
      }
      graph.set(f, deps);
    }
  }
  const cycles: string[][] = [];
  const state = new Map<string, 'open' | 'done'>();
  const stack: string[] = [];
  const walk = (n: string): void => {
    state.set(n, 'open');
    stack.push(n);
    for (const d of graph.get(n) ?? []) {
      if (!graph.has(d)) continue;
      const s = state.get(d);
      if (s === 'open') cycles.push([...stack.slice(stack.indexOf(d)), d]);
      else if (s === undefined) walk(d);
    }
    stack.pop();
    state.set(n, 'done');
  };
  for (const n of graph.keys()) if (!state.has(n)) walk(n);
  return cycles;
}

export function castReport(repo: string): Map<string, number> {
  const out = new Map<string, number>();
  for (const root of SOURCE_ROOTS) for (const f of sourceFiles(root, repo)) out.set(f, castsIn(readFileSync(join(repo, f), 'utf8'), f));
  return out;
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const repo = resolve(dirname(new URL(import.meta.url).pathname), '..');
  const casts = castReport(repo);
  const total = [...casts.values()].reduce((a, b) => a + b, 0);
  const byRoot = SOURCE_ROOTS.map((r) => `${r} ${[...casts].filter(([f]) => f.startsWith(r)).reduce((a, [, n]) => a + n, 0)}`);
  console.log(`casts in source: ${total} (${byRoot.join(', ')})`);
  for (const [f, n] of [...casts].sort((a, b) => b[1] - a[1]).slice(0, 15)) console.log(`  ${String(n).padStart(3)} ${f}`);
  const sql = sqlOutsideAdapters(repo);
  console.log(`files with SQL outside adapters/: ${sql.length}`);
  for (const f of sql) console.log(`  ${f}`);
  const cycles = importCycles(repo);
  console.log(`import cycles: ${cycles.length}`);
  for (const c of cycles) console.log(`  ${c.join(' -> ')}`);
}
