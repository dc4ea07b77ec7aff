// tests/viz/browser_test.mjs - the timeline page in a real headless Chromium.
//
// Usage: node browser_test.mjs TEST_NAME   (meson runs one process per test)
// Environment (set by tests/viz/meson.build): VT_CLI (vramtrace), VT_GEN
// (gen_snapshot), VT_ARTIFACTS (screenshots and pages go there),
// VT_VIZ_TESTS (this folder, for node_modules).
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
const here = process.env.VT_VIZ_TESTS || new URL('.', import.meta.url).pathname;
const artifacts = process.env.VT_ARTIFACTS || join(tmpdir(), 'vt-viz-artifacts');

function skip(msg) {
  console.log('SKIP: ' + msg);
  process.exit(SKIP);
}
function fail(msg) {
  console.error('FAIL: ' + msg);
  process.exitCode = 1;
  throw new Error(msg);
}
function check(cond, msg) {
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

/* Make the snapshot and its page for one test. */
function makePage(tag, withCheck) {
  const snap = join(artifacts, tag + '.vtsnap');
  const html = join(artifacts, tag + '.html');
  execFileSync(process.env.VT_GEN, ['small', snap], { stdio: 'pipe' });
  execFileSync(process.env.VT_CLI, ['viz', snap, '-o', html, '-q'].concat(withCheck ? ['--check'] : []), { stdio: 'pipe' });
  return html;
}

/* Open `html` from file:// in a fresh profile; record requests and errors. */
async function open(html) {
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
  await page.waitForFunction(() => window.__vt && window.__vt.firstPaintMs > 0, null, { timeout: 15000 });
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

async function shot(page, tag) {
  const p = join(artifacts, tag + '.png');
  await page.screenshot({ path: p, fullPage: true });
  console.log('screenshot: ' + p);
}

/* Pixel statistics of a canvas: drawn (non-transparent) pixels, and pixels
 * close to an RGB colour. */
function canvasStats(page, id, rgb) {
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

const tests = {
  async page_loads_offline() {
    const html = makePage('page_loads_offline', false);
    const { page, close, verifyQuiet, requests, url } = await open(html);
    try {
      const st = await canvasStats(page, 'tl');
      check(st.drawn > 5000, 'timeline canvas mostly empty: ' + JSON.stringify(st));
      check(st.colours >= 6, 'timeline has too few colours (bands by call site): ' + JSON.stringify(st));
      const info = await page.evaluate(() => ({ n: window.__vt.nLifetimes, e: window.__vt.nEvents,
        stats: document.getElementById('stats').textContent, fp: window.__vt.firstPaintMs }));
      check(info.n > 20, 'too few allocations decoded: ' + info.n);
      check(/peak allocated/.test(info.stats), 'header stats missing: ' + info.stats);
      check(requests.length >= 1 && requests[0] === url, 'the page itself was not the first request');
      console.log('first paint ' + info.fp.toFixed(0) + ' ms, ' + info.n + ' allocations, ' + info.e + ' events');
      await shot(page, 'page_loads_offline');
      verifyQuiet();
    } finally {
      await close();
    }
  },

  async hover_and_click() {
    const html = makePage('hover_and_click', false);
    const { page, close, verifyQuiet } = await open(html);
    try {
      const pos = await page.evaluate(() => window.__vt.locate(window.__vt.findLifetime('fc1.weight')));
      check(pos, 'fc1.weight is not drawn on the timeline');
      await page.mouse.move(pos.x, pos.y);
      await page.waitForSelector('#tooltip:not([hidden])', { timeout: 5000 });
      const tipText = await page.textContent('#tooltip');
      check(tipText.includes('fc1.weight'), 'tooltip lacks the tensor name: ' + tipText);
      check(tipText.includes('8.00 MiB'), 'tooltip lacks the size: ' + tipText);
      check(tipText.includes('make_weights'), 'tooltip lacks the call site: ' + tipText);
      await shot(page, 'hover_and_click_hover');
      await page.mouse.click(pos.x, pos.y);
      await page.waitForFunction(() => document.getElementById('detail').textContent.includes('Allocation stack'));
      const detail = await page.textContent('#detail');
      for (const fn of ['make_weights', 'setup', 'main', 'train.py', '8388608 B', 'never (alive at the end)']) {
        check(detail.includes(fn), 'detail panel lacks "' + fn + '": ' + detail);
      }
      // An activation: freed, so its free stack is shown too.
      const pos2 = await page.evaluate(() => window.__vt.locate(window.__vt.findLifetime('act2')));
      check(pos2, 'act2 is not drawn');
      await page.mouse.click(pos2.x, pos2.y);
      await page.waitForFunction(() => document.getElementById('detail').textContent.includes('act2'));
      const d2 = await page.textContent('#detail');
      check(d2.includes('Linear.forward') && d2.includes('free_activations'), 'act2 stacks wrong: ' + d2);
      const top = await page.textContent('#top');
      check(top.includes('act2') && top.includes('fc1.weight'), 'table at the clicked moment lacks act2/fc1.weight: ' + top);
      await shot(page, 'hover_and_click');
      verifyQuiet();
    } finally {
      await close();
    }
  },

  async check_findings() {
    const html = makePage('check_findings', true);
    const { page, close, verifyQuiet } = await open(html);
    try {
      const text = await page.textContent('#findings');
      check(/linger/.test(text) && /cache\.1/.test(text), 'findings panel lacks the leak: ' + text);
      // The part of the leaked bands after their last use is hatched red.
      const st = await canvasStats(page, 'tl', [0xd3, 0x2f, 0x2f]);
      check(st.match > 50, 'no hatched (red) band on the timeline: ' + JSON.stringify(st));
      await page.click('#findings .finding');
      await page.waitForFunction(() => document.getElementById('detail').textContent.includes('Checker finding'));
      const detail = await page.textContent('#detail');
      check(detail.includes('Cache.entries'), 'retention path missing in the detail: ' + detail);
      check(detail.includes('Cache.remember'), 'allocation stack of the leak missing: ' + detail);
      // Hovering a hatched pixel says so.
      const pos = await page.evaluate(() => window.__vt.locate(window.__vt.findLifetime('cache.1')));
      check(pos, 'cache.1 not drawn');
      await page.mouse.move(pos.x, pos.y);
      await page.waitForSelector('#tooltip:not([hidden])');
      const tip = await page.textContent('#tooltip');
      check(tip.includes('cache.1') && tip.includes('linger'), 'tooltip of the leak: ' + tip);
      await shot(page, 'check_findings');
      verifyQuiet();
    } finally {
      await close();
    }
  },

  async views_and_zoom() {
    const html = makePage('views_and_zoom', false);
    const { page, close, verifyQuiet } = await open(html);
    try {
      await page.waitForFunction(() => document.getElementById('flame-label').textContent.length > 0);
      const seg = await canvasStats(page, 'seg', [0xf0, 0xb3, 0x5a]);
      check(seg.drawn > 2000 && seg.match > 100, 'segments view lacks unused-in-cache area: ' + JSON.stringify(seg));
      const fl = await canvasStats(page, 'flame');
      check(fl.drawn > 2000, 'icicle view empty: ' + JSON.stringify(fl));
      const rows = await page.$$eval('#top tr.row', (r) => r.length);
      check(rows >= 5, 'top table has ' + rows + ' rows');
      // Zoom with the wheel around the middle of the timeline.
      const box = await page.locator('#tl').boundingBox();
      const before = await page.evaluate(() => [window.__vt.view.v0, window.__vt.view.v1, window.__vt.drawCount]);
      await page.mouse.move(box.x + box.width * 0.5, box.y + box.height * 0.5);
      for (let i = 0; i < 5; i++) {
        await page.mouse.wheel(0, -400);
        await page.waitForTimeout(30);
      }
      await page.waitForFunction((n) => window.__vt.drawCount > n, before[2]);
      const after = await page.evaluate(() => [window.__vt.view.v0, window.__vt.view.v1, window.__vt.drawCount, window.__vt.lastDrawMs]);
      check(after[1] - after[0] < (before[1] - before[0]) / 3, 'wheel did not zoom: ' + before + ' -> ' + after);
      check(after[3] < 250, 'redraw too slow: ' + after[3] + ' ms');
      // Drag pans.
      await page.mouse.move(box.x + box.width * 0.6, box.y + 50);
      await page.mouse.down();
      await page.mouse.move(box.x + box.width * 0.3, box.y + 50, { steps: 5 });
      await page.mouse.up();
      await page.waitForTimeout(50);
      const panned = await page.evaluate(() => [window.__vt.view.v0, window.__vt.view.v1]);
      check(panned[0] > after[0], 'drag did not pan: ' + after + ' -> ' + panned);
      // x by event index.
      await page.click('#xmode');
      await page.waitForFunction(() => window.__vt.view.mode === 'event');
      await page.click('#reset');
      await page.waitForTimeout(50);
      const st = await canvasStats(page, 'tl');
      check(st.drawn > 5000, 'event-index timeline empty: ' + JSON.stringify(st));
      // Marks are labelled.
      const marks = await page.evaluate(() => document.getElementById('vt-meta').textContent.includes('step 3'));
      check(marks, 'marks missing from the data');
      await shot(page, 'views_and_zoom');
      verifyQuiet();
    } finally {
      await close();
    }
  },
};

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
