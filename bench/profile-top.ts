/**
 * Summarises a `node --cpu-prof` profile: self and inclusive time per function
 * (by name and file), the figures docs/performance.md quotes.
 *
 *   node --import tsx bench/profile-top.ts <file.cpuprofile> [name-filter ...]
 */
import { readFileSync } from 'node:fs';

interface Node {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  children?: number[];
}
interface Profile {
  nodes: Node[];
  samples: number[];
  timeDeltas: number[];
  startTime: number;
  endTime: number;
}

const [file, ...filters] = process.argv.slice(2);
if (file === undefined) throw new Error('usage: profile-top.ts <file.cpuprofile> [name ...]');
const p = JSON.parse(readFileSync(file, 'utf8')) as Profile;
const byId = new Map(p.nodes.map((n) => [n.id, n]));
const parent = new Map<number, number>();
for (const n of p.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
const selfUs = new Map<number, number>();
p.samples.forEach((id, i) => selfUs.set(id, (selfUs.get(id) ?? 0) + (p.timeDeltas[i] ?? 0)));

const label = (n: Node) =>
  `${n.callFrame.functionName || '(anonymous)'} ${n.callFrame.url.split('/').slice(-2).join('/')}:${n.callFrame.lineNumber + 1}`;
const self = new Map<string, number>();
const incl = new Map<string, number>();
for (const [id, us] of selfUs) {
  const n = byId.get(id)!;
  self.set(label(n), (self.get(label(n)) ?? 0) + us);
  // inclusive: count once per distinct label on the stack (recursion does not double count)
  const seen = new Set<string>();
  for (let cur: number | undefined = id; cur !== undefined; cur = parent.get(cur)) {
    const l = label(byId.get(cur)!);
    if (seen.has(l)) continue;
    seen.add(l);
    incl.set(l, (incl.get(l) ?? 0) + us);
  }
}
const total = (p.endTime - p.startTime) / 1000;
const idle = [...self].filter(([l]) => l.startsWith('(idle)')).reduce((a, [, v]) => a + v, 0) / 1000;
console.log(`profile ${total.toFixed(0)} ms, idle ${idle.toFixed(0)} ms (${((100 * idle) / total).toFixed(0)} %)`);
const ms = (us: number) => (us / 1000).toFixed(0).padStart(6);
console.log('\nself (top 25)');
for (const [l, us] of [...self].sort((a, b) => b[1] - a[1]).slice(0, 25)) console.log(`${ms(us)} ms  ${l}`);
if (filters.length > 0) {
  console.log('\ninclusive (filtered)');
  for (const [l, us] of [...incl]
    .filter(([l]) => filters.some((f) => l.includes(f)))
    .sort((a, b) => b[1] - a[1])
    .slice(0, 40))
    console.log(`${ms(us)} ms  ${l}`);
}
