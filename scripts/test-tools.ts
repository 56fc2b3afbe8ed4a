/**
 * `npm test`'s pretest step: makes sure the programs the suite drives are on
 * this machine, so the README's test command passes on a fresh one by itself.
 *
 * - Debian's `mosquitto` with `mosquitto_ctrl` and its dynamic-security
 *   plugin: broker-account and site-login tests start Mosquittos of their own.
 * - Debian's `tshark`: the site TLS test captures the site broker's port and
 *   looks for PINs and passwords in the bytes.
 * - Debian's `chromium`: the staff web UI tests drive it through
 *   playwright-core (a browser is never downloaded); Debian's
 *   `fonts-ipafont-gothic` (3.5 MB), so its screenshots of the staff UI in
 *   Japanese show the text, not empty boxes.
 *
 * Missing ones are installed with apt-get when it can (root, Debian); else it
 * stops with one line naming the command to run. Never a silent skip: a
 * suite that quietly left out its broker or browser tests would pass while
 * proving less.
 */
import { spawnSync } from 'node:child_process';
import { accessSync, constants, existsSync } from 'node:fs';
import { delimiter, join } from 'node:path';
// the module the Mosquitto tests start brokers with (node built-ins only: cheap to load here)
import { DEFAULT_DYNSEC_PLUGIN } from '../shared/src/testing/mosquitto.js';

interface Need {
  /** What it is for, in the message. */
  readonly what: string;
  /** The Debian package that brings it. */
  readonly pkg: string;
  readonly present: () => boolean;
}

function onPath(name: string): boolean {
  return (process.env.PATH ?? '').split(delimiter).some((dir) => {
    try {
      accessSync(join(dir, name), constants.X_OK);
      return true;
    } catch {
      return false;
    }
  });
}

const needs: readonly Need[] = [
  { what: 'mosquitto', pkg: 'mosquitto', present: () => onPath('mosquitto') },
  { what: 'mosquitto_ctrl', pkg: 'mosquitto', present: () => onPath('mosquitto_ctrl') },
  {
    what: "Mosquitto's dynamic-security plugin",
    pkg: 'mosquitto',
    present: () => existsSync(process.env.TOBIRA_DYNSEC_PLUGIN ?? DEFAULT_DYNSEC_PLUGIN),
  },
  // the site TLS proof captures the site broker's traffic (gateway/test/site-tls-capture.test.ts); root captures without setcap
  { what: 'tshark', pkg: 'tshark', present: () => onPath('tshark') },
  { what: 'chromium', pkg: 'chromium', present: () => existsSync(process.env.TOBIRA_CHROMIUM ?? '/usr/bin/chromium') },
  {
    what: 'a Japanese font (the staff UI screenshots in Japanese)',
    pkg: 'fonts-ipafont-gothic',
    present: () => existsSync('/usr/share/fonts/opentype/ipafont-gothic/ipag.ttf'),
  },
];

const say = (line: string) => process.stdout.write(`[tobira] ${line}\n`);
const missing = () => needs.filter((n) => !n.present());

function aptInstall(pkgs: readonly string[]): boolean {
  const install = () =>
    spawnSync('apt-get', ['install', '-y', '--no-install-recommends', ...pkgs], {
      stdio: 'inherit',
      env: { ...process.env, DEBIAN_FRONTEND: 'noninteractive' },
    }).status === 0;
  if (install()) return true;
  say('apt-get install failed; refreshing the package lists (apt-get update) and trying once more');
  return spawnSync('apt-get', ['update'], { stdio: 'inherit' }).status === 0 && install();
}

const first = missing();
if (first.length > 0) {
  const pkgs = [...new Set(first.map((n) => n.pkg))];
  const names = first.map((n) => n.what).join(', ');
  const canInstall = process.getuid?.() === 0 && onPath('apt-get');
  if (!canInstall) {
    say(
      `npm test needs ${names}: run \`sudo apt-get install -y --no-install-recommends ${pkgs.join(' ')}\` (Debian/Ubuntu) and run npm test again`,
    );
    process.exit(1);
  }
  say(`test tools: ${names} missing; installing Debian's ${pkgs.join(' ')} with apt-get …`);
  const installed = aptInstall(pkgs);
  const still = missing();
  if (!installed || still.length > 0) {
    say(
      `could not install ${still.map((n) => n.what).join(', ') || pkgs.join(' ')}: run \`apt-get install -y --no-install-recommends ${pkgs.join(' ')}\` and run npm test again`,
    );
    process.exit(1);
  }
  say('test tools: installed');
}
