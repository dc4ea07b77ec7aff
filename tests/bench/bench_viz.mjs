// tests/bench/bench_viz.mjs - open a rendered timeline in headless Chromium
// and print when the page finished its first timeline draw, plus the cost
// of redraws while zooming. Usage: node bench_viz.mjs PAGE.html
// Prints "first_paint_s=<s>"; exit 77 when chromium or playwright-core is missing.
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

const CHROMIUM = process.env.VT_CHROMIUM || '/usr/bin/chromium';
const vizTests = process.env.VT_VIZ_TESTS || new URL('../viz/', import.meta.url).pathname;
if (!existsSync(CHROMIUM)) { console.log('SKIP: no ' + CHROMIUM); process.exit(77); }
let playwright;
try {
  playwright = createRequire(join(vizTests, 'package.json'))('playwright-core');
} catch (e) {
  console.log('SKIP: playwright-core missing: run `npm ci` in ' + vizTests);
  process.exit(77);
}

const profile = mkdtempSync(join(tmpdir(), 'vt-chromium-'));
const ctx = await playwright.chromium.launchPersistentContext(profile, {
  executablePath: CHROMIUM,
  headless: true,
  viewport: { width: 1400, height: 1000 },
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
    '--disable-background-networking', '--disable-component-update', '--disable-sync'],
});
try {
  const page = ctx.pages()[0] || await ctx.newPage();
  const errors = [];
  page.on('pageerror', (e) => errors.push(e.message));
  const t0 = Date.now();
  await page.goto(pathToFileURL(process.argv[2]).href, { waitUntil: 'load', timeout: 60000 });
  await page.waitForFunction(() => window.__vt && window.__vt.firstPaintMs > 0, null, { timeout: 60000 });
  const fp = await page.evaluate(() => window.__vt.firstPaintMs);
  const info = await page.evaluate(() => ({ n: window.__vt.nLifetimes, e: window.__vt.nEvents, draw: window.__vt.lastDrawMs }));
  console.log(`page: ${info.e} axis events, ${info.n} allocations; first draw took ${info.draw.toFixed(1)} ms; wall to first paint ${Date.now() - t0} ms`);
  // Zoom in 10 steps and out again: the slowest redraw is what a user feels.
  const box = await page.locator('#tl').boundingBox();
  await page.mouse.move(box.x + box.width * 0.6, box.y + box.height / 2);
  let worst = 0;
  for (const dy of [-500, -500, -500, -500, -500, 500, 500, 500, 500, 500]) {
    const n = await page.evaluate(() => window.__vt.drawCount);
    await page.mouse.wheel(0, dy);
    await page.waitForFunction((k) => window.__vt.drawCount > k, n);
    worst = Math.max(worst, await page.evaluate(() => window.__vt.lastDrawMs));
  }
  console.log(`slowest redraw while zooming: ${worst.toFixed(1)} ms`);
  if (errors.length) { console.error('page errors: ' + errors.join(' | ')); process.exitCode = 1; }
  console.log('first_paint_s=' + (fp / 1000).toFixed(3));
} finally {
  await ctx.close();
  rmSync(profile, { recursive: true, force: true });
}
