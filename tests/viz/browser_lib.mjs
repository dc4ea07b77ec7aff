// tests/viz/browser_lib.mjs - what the Chromium tests of the timeline page
// share (browser_test.mjs: the page on generated snapshots;
// browser_torch_test.mjs: on real torch programs' snapshots): the browser
// and its checks, the pages made from snapshots, and the runner of one
// test per process.
//
// The browser is the system's /usr/bin/chromium driven by playwright-core;
// never a downloaded one. Missing chromium or node_modules: exit 77 (skip).
// Every test also asserts that the page made no network request at all and
// logged no console error.
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

const CHROMIUM = process.env.VT_CHROMIUM || '/usr/bin/chromium';
const SKIP = 77;
const name = process.argv[2];
export const here = process.env.VT_VIZ_TESTS || new URL('.', import.meta.url).pathname;
export const artifacts = process.env.VT_ARTIFACTS || join(tmpdir(), 'vt-viz-artifacts');

function skip(msg) {
  console.log('SKIP: ' + msg);
  process.exit(SKIP);
}
function fail(msg) {
  console.error('FAIL: ' + msg);
  process.exitCode = 1;
  throw new Error(msg);
}
export function check(cond, msg) {
  if (!cond) fail(msg);
}

if (!existsSync(CHROMIUM)) skip(CHROMIUM + ' not found (apt-get install -y chromium)');
let playwright;
try {
  playwright = createRequire(join(here, 'package.json'))('playwright-core');
} catch (e) {
  skip('playwright-core not installed: run `npm ci` in ' + here);
}
for (const v of ['VT_CLI', 'VT_GEN']) if (!process.env[v]) fail(v + ' is not set (run through meson test)');

mkdirSync(artifacts, { recursive: true });

/* Make the snapshot and its page for one test (genArgs: gen_snapshot's
 * arguments after the file, as the big run's event count). */
export function makePage(tag, withCheck, kind, genArgs) {
  const snap = join(artifacts, tag + '.vtsnap');
  const html = join(artifacts, tag + '.html');
  execFileSync(process.env.VT_GEN, [kind || 'small', snap].concat(genArgs || []), { stdio: 'pipe' });
  execFileSync(process.env.VT_CLI, ['viz', snap, '-o', html, '-q'].concat(withCheck ? ['--check'] : []), { stdio: 'pipe' });
  return html;
}

/* Run a torch program (under simrun, with the built library) that writes
 * snapshot `snap` and prints one JSON line last; that line, parsed. */
export function runTorch(script, args) {
  for (const v of ['VT_SIMRUN', 'VT_TEST_PYTHON', 'VRAMTRACE_LIB']) {
    if (!process.env[v]) skip(v + ' is not set: the torch programs run through tests/torch/meson.build');
  }
  const out = execFileSync(process.env.VT_SIMRUN, ['--', process.env.VT_TEST_PYTHON, script].concat(args),
    { stdio: ['ignore', 'pipe', 'pipe'], timeout: 120000, env: { ...process.env, PYTHONWARNINGS: 'ignore' } });
  const lines = out.toString().trim().split('\n');
  return JSON.parse(lines[lines.length - 1]);
}
/* `vramtrace check SNAP --json [args]`: the report (exit 0 or 1). */
export function checkJson(snap, args) {
  try {
    return JSON.parse(execFileSync(process.env.VT_CLI, ['check', snap, '--json'].concat(args || []), { stdio: 'pipe' }).toString());
  } catch (e) {
    if (e.status === 1) return JSON.parse(e.stdout.toString());
    throw e;
  }
}
// `vramtrace check`'s text report (it exits 1 on findings).
export function checkText(snap, args) {
  try {
    return execFileSync(process.env.VT_CLI, ['check', snap, '--top', '0'].concat(args || []), { stdio: 'pipe' }).toString();
  } catch (e) {
    if (e.status === 1) return e.stdout.toString();
    throw e;
  }
}
export function viz(snap, html, args) {
  execFileSync(process.env.VT_CLI, ['viz', snap, '-o', html, '-q'].concat(args || []), { stdio: 'pipe' });
  return html;
}
export const pythonTests = join(here, '..', 'python');

/* Open `html` from file:// in a fresh profile; record requests and errors. */
export async function open(html, ready) {
  const profile = mkdtempSync(join(tmpdir(), 'vt-chromium-'));
  const ctx = await playwright.chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    viewport: { width: 1400, height: 1000 },
    deviceScaleFactor: 1,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
  const url = pathToFileURL(html).href;
  const requests = [];
  const errors = [];
  ctx.on('request', (r) => requests.push(r.url()));
  const page = ctx.pages()[0] || await ctx.newPage();
  page.on('console', (m) => { if (m.type() === 'error') errors.push('console: ' + m.text()); });
  page.on('pageerror', (e) => errors.push('pageerror: ' + e.message));
  page.on('requestfailed', (r) => errors.push('request failed: ' + r.url()));
  await page.goto(url, { waitUntil: 'load' });
  await until(page, ready || (() => window.__vt && window.__vt.firstPaintMs > 0), null, 15000);
  const close = async () => {
    await ctx.close();
    rmSync(profile, { recursive: true, force: true });
  };
  const verifyQuiet = () => {
    const bad = requests.filter((u) => u !== url && !u.startsWith('data:') && !u.startsWith('blob:'));
    check(bad.length === 0, 'network requests: ' + bad.join(', '));
    check(errors.length === 0, 'errors in the page: ' + errors.join(' | '));
  };
  return { page, close, verifyQuiet, requests, errors, url };
}

export async function shot(page, tag) {
  const p = join(artifacts, tag + '.png');
  await page.screenshot({ path: p, fullPage: true });
  console.log('screenshot: ' + p);
}

/* Poll `fn(arg)` in the page until it is truthy. page.waitForFunction
 * cannot poll here: it re-evaluates a string, which the page's CSP (no
 * 'unsafe-eval') forbids; page.evaluate is not affected. */
export async function until(page, fn, arg, ms = 5000) {
  const stop = Date.now() + ms;
  for (;;) {
    if (await page.evaluate(fn, arg)) return;
    if (Date.now() > stop) fail('timed out waiting for ' + fn.toString().slice(0, 120));
    await page.waitForTimeout(20);
  }
}

/* Hover at (x, y) and return the tooltip's text (moving away first, so a
 * tooltip left from before cannot answer). */
export async function hoverTip(page, x, y) {
  await page.mouse.move(5, 5);
  await page.waitForSelector('#tooltip', { state: 'hidden', timeout: 5000 }).catch(() => {});
  await page.mouse.move(x, y);
  await page.waitForSelector('#tooltip:not([hidden])', { timeout: 5000 });
  return page.textContent('#tooltip');
}

/* Wheel `steps` times by dy at (x, y), waiting for the redraws. */
export async function wheelAt(page, x, y, dy, steps) {
  await page.mouse.move(x, y);
  for (let i = 0; i < steps; i++) {
    const n = await page.evaluate(() => window.__vt.drawCount);
    await page.mouse.wheel(0, dy);
    await until(page, (k) => window.__vt.drawCount > k, n);
  }
}

/* Pixel statistics of a canvas: drawn (non-transparent) pixels, and pixels
 * close to an RGB colour. */
export function canvasStats(page, id, rgb) {
  return page.evaluate(([cid, col]) => {
    const c = document.getElementById(cid);
    const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
    let drawn = 0, match = 0;
    const colours = new Set();
    for (let i = 0; i < d.length; i += 4) {
      if (d[i + 3] === 0) continue;
      drawn++;
      if (colours.size < 64) colours.add((d[i] << 16) | (d[i + 1] << 8) | d[i + 2]);
      if (col && Math.abs(d[i] - col[0]) < 8 && Math.abs(d[i + 1] - col[1]) < 8 && Math.abs(d[i + 2] - col[2]) < 8) match++;
    }
    return { drawn, match, colours: colours.size, w: c.width, h: c.height };
  }, [id, rgb || null]);
}

/* Click the lifetime of `name` on the timeline; the detail panel's text once
 * it shows `text`. */
export async function clickLifetime(page, name, text) {
  const pos = await page.evaluate((n) => window.__vt.locate(window.__vt.findLifetime(n)), name);
  check(pos, name + ' is not drawn');
  await page.mouse.click(pos.x, pos.y);
  await until(page, (t) => document.getElementById('detail').textContent.includes(t), text);
  return page.textContent('#detail');
}

/* Open every group of the findings list (one entry per cause, as
 * `vramtrace check` groups them): afterwards each finding is one
 * `#findings div.finding[data-f=K]`, K its place in the checker's order. */
export async function expandFindings(page) {
  for (let guard = 0; guard < 200; guard++) {
    const closed = await page.$('#findings details:not([open]) > summary');
    if (!closed) return;
    await closed.click();
  }
  fail('the findings groups do not open');
}

/* Open the page `html`, run body(page, opened), then check the page logged
 * nothing unexpected (verifyQuiet); the page is closed whatever happens. */
export async function withPage(html, body) {
  const opened = await open(html);
  try {
    await body(opened.page, opened);
    opened.verifyQuiet();
  } finally {
    await opened.close();
  }
}

/* Run the test named on the command line, of ``tests`` (name -> async fn). */
export async function runTest(tests) {
  if (!tests[name]) {
    console.error('unknown test ' + name + '; tests: ' + Object.keys(tests).join(' '));
    process.exit(2);
  }
  try {
    await tests[name]();
    console.log('ok ' + name);
  } catch (e) {
    if (!process.exitCode) console.error(e && e.stack ? e.stack : e);
    process.exitCode = 1;
  }
}
