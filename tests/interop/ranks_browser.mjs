// tests/interop/ranks_browser.mjs - `vramtrace viz A B -o ranks.html` in a
// real headless Chromium: the rank selector, the overview of every rank,
// each rank's own timeline inside, no network request, no error.
//
// Usage: node ranks_browser.mjs   (environment from tests/interop/meson.build:
// VT_CLI, VT_VIZ_TESTS for playwright-core, PYTHONPATH for torch_snapshot.py)
// Missing chromium or playwright-core: exit 77 (skip).
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

const CHROMIUM = process.env.VT_CHROMIUM || '/usr/bin/chromium';
function skip(msg) { console.log('SKIP: ' + msg); process.exit(77); }
function check(cond, msg) { if (!cond) { console.error('FAIL: ' + msg); process.exit(1); } }

if (!existsSync(CHROMIUM)) skip(CHROMIUM + ' not found (apt-get install -y chromium)');
let playwright;
try {
  playwright = createRequire(join(process.env.VT_VIZ_TESTS, 'package.json'))('playwright-core');
} catch (e) {
  skip('playwright-core not installed: run `npm ci` in ' + process.env.VT_VIZ_TESTS);
}
const work = mkdtempSync(join(tmpdir(), 'vt-ranks-'));
execFileSync('python3', ['-c', `
import torch_snapshot as ts
ts.dump(ts.training_run().snapshot(), "${work}/r0.pickle")
ts.dump(ts.training_run(extra_hold=64 << 20).snapshot(), "${work}/r1.pickle")
`]);
const html = join(work, 'ranks.html');
execFileSync(process.env.VT_CLI, ['viz', join(work, 'r0.pickle'), join(work, 'r1.pickle'), '-o', html, '-q']);

const profile = mkdtempSync(join(tmpdir(), 'vt-chromium-'));
const ctx = await playwright.chromium.launchPersistentContext(profile, {
  executablePath: CHROMIUM, headless: true, viewport: { width: 1400, height: 1000 },
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run',
    '--disable-background-networking', '--disable-component-update', '--disable-sync'],
});
const url = pathToFileURL(html).href;
const requests = [], errors = [];
ctx.on('request', (r) => requests.push(r.url()));
const page = ctx.pages()[0] || await ctx.newPage();
page.on('console', (m) => { if (m.type() === 'error') errors.push('console: ' + m.text()); });
page.on('pageerror', (e) => errors.push('pageerror: ' + e.message));
await page.goto(url, { waitUntil: 'load' });

async function innerReady(file) {
  const stop = Date.now() + 15000;
  for (;;) {
    const f = page.frames().find((x) => x !== page.mainFrame());
    if (f) {
      const ok = await f.evaluate((name) => !!(window.__vt && window.__vt.firstPaintMs > 0 &&
        document.documentElement.innerHTML.includes(name)), file).catch(() => false);
      if (ok) return;
    }
    if (Date.now() > stop) check(false, 'the rank page for ' + file + ' never painted');
    await page.waitForTimeout(50);
  }
}
try {
  const buttons = await page.$$eval('#ranks button', (bs) => bs.map((b) => [b.textContent, b.className]));
  check(buttons.length === 2, 'two rank buttons: ' + JSON.stringify(buttons) + ' errors: ' + errors.join(' | '));
  check(buttons[0][0] === 'rank 0 (15.0 MiB)' && buttons[1][0] === 'rank 1 (79.0 MiB)',
    'button labels: ' + JSON.stringify(buttons));
  check(buttons[1][1] === 'sel', 'the rank with the highest peak is shown first');
  await innerReady('r1.pickle');
  check(await page.$$eval('#overview polyline', (p) => p.length) === 2, 'two curves in the overview');
  await page.click('#ranks button >> nth=0');
  await innerReady('r0.pickle');
  check(await page.$eval('#ranks button >> nth=0', (b) => b.className) === 'sel', 'rank 0 selected');
  await page.selectOption('#align', 'mark');
  const widths = await page.$$eval('#overview polyline', (p) => p.map((x) => x.getAttribute('stroke-width')));
  check(widths.length === 2 && widths[0] === '2.5', 'aligned by marks, rank 0 highlighted: ' + widths);
  // The overview reads on its own: ticks on both axes, a legend naming
  // every rank, and a tooltip with every rank's bytes at the cursor.
  const ov = await page.evaluate(() => ({
    yl: Array.from(document.querySelectorAll('#overview .ylabel')).map((t) => t.textContent),
    xl: Array.from(document.querySelectorAll('#overview .xlabel')).map((t) => t.textContent),
    legend: Array.from(document.querySelectorAll('#overview .legend .item')).map((t) => t.textContent),
  }));
  check(ov.yl.length >= 2 && ov.yl.some((t) => /MiB/.test(t)), 'byte ticks: ' + JSON.stringify(ov.yl));
  check(ov.xl.length >= 3 && ov.xl.every((t) => / m?s$/.test(t)), 'time ticks: ' + JSON.stringify(ov.xl));
  check(ov.legend.join('|') === 'rank 0|rank 1', 'legend: ' + JSON.stringify(ov.legend));
  const box = await page.locator('#overview').boundingBox();
  await page.mouse.move(box.x + box.width * 0.6, box.y + box.height * 0.5);
  const tipText = await page.textContent('#ov-tip');
  check(await page.isVisible('#ov-tip') && /rank 0: .*(B|iB)/.test(tipText) && /rank 1: /.test(tipText), 'overview tooltip: ' + tipText);
  const note = await page.textContent('#align-note');
  await page.screenshot({ path: join(work, 'ranks.png') });
  const bad = requests.filter((u) => u !== url && !u.startsWith('data:') && !u.startsWith('blob:') &&
    !u.startsWith('about:'));
  check(bad.length === 0, 'network requests: ' + bad.join(', '));
  check(errors.length === 0, 'errors: ' + errors.join(' | '));
  // A rank without marks: aligning at the first mark says so
  // (tests/viz's ranks_without_marks_say_so checks a page with none).
  const unmarked = await page.evaluate(() => JSON.parse(document.getElementById('vt-ranks').textContent).filter((r) => !r.marks.length).length);
  check(!unmarked || /no marks/.test(note), 'a rank without marks, not said: ' + note);
  console.log('ok viz_of_several_ranks_has_a_selector_and_an_overview');
} finally {
  await ctx.close();
  rmSync(profile, { recursive: true, force: true });
  rmSync(work, { recursive: true, force: true });
}
