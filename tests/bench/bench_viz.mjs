// tests/bench/bench_viz.mjs - open a rendered timeline in headless Chromium
// and print when the page finished its first timeline draw, the level of
// detail of that draw, and the cost of redraws while zooming (wheel steps,
// a deep zoom at the end of the run, y "fit activity" there, a shift+wheel
// y zoom, drag pans at the whole run and zoomed in). Usage: node bench_viz.mjs PAGE.html
// VT_BENCH_SHOT=PREFIX saves PREFIX-full.png and PREFIX-deep.png.
// Prints "slowest_redraw_ms=<ms>" and "first_paint_s=<s>"; exit 77 when chromium or playwright-core is missing.
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
  // The first view is the run: the pans below start from it.
  const full = await page.evaluate(() => [window.__vt.view.v0, window.__vt.view.v1]);
  const info = await page.evaluate(() => ({ n: window.__vt.nLifetimes, e: window.__vt.nEvents, draw: window.__vt.lastDrawMs }));
  console.log(`page: ${info.e} axis events, ${info.n} allocations; first draw took ${info.draw.toFixed(1)} ms; wall to first paint ${Date.now() - t0} ms`);
  const lod = await page.evaluate(() => window.__vt.lod);
  console.log(`level of detail at full view: ${lod.exact} exact band columns, ${lod.summary} summary band columns${lod.window ? ", window mode (" + lod.window + " events)" : ""}`);
  if (process.env.VT_BENCH_SHOT) {
    await page.screenshot({ path: process.env.VT_BENCH_SHOT + '-full.png' });
    console.log('screenshot: ' + process.env.VT_BENCH_SHOT + '-full.png');
  }
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
  // Deep zoom near the end of the run, a two-thousandth of it wide (the
  // sweep walks every event before the window), and a y zoom there.
  const n0 = await page.evaluate(() => window.__vt.drawCount);
  const deep = await page.evaluate(([v0, v1]) => {
    const span = v1 - v0, end = v0 + span * 0.97;
    window.__vt.zoomTo(end - span / 2000, end);
    return window.__vt.lastDrawMs;
  }, full);
  const redrawn = async (k) => {
    for (let i = 0; i < 250 && await page.evaluate(() => window.__vt.drawCount) <= k; i++) await page.waitForTimeout(20);
    return page.evaluate(() => [window.__vt.lastDrawMs, window.__vt.drawCount, window.__vt.lod]);
  };
  // y "fit activity": the steps on top of the leaked base fill the plot.
  await page.selectOption('#ymode', 'span');
  const [spanMs, n1, lodSpan] = await redrawn(n0 + 1);
  if (process.env.VT_BENCH_SHOT) {
    await page.screenshot({ path: process.env.VT_BENCH_SHOT + '-deep.png' });
    console.log('screenshot: ' + process.env.VT_BENCH_SHOT + '-deep.png');
  }
  await page.keyboard.down('Shift');
  await page.mouse.wheel(0, -500);
  await page.keyboard.up('Shift');
  const [ydraw] = await redrawn(n1);
  console.log(`deep zoom at the end: ${deep.toFixed(1)} ms; y fit activity: ${spanMs.toFixed(1)} ms ` +
    `(${lodSpan.exact} exact, ${lodSpan.summary} summary band columns); then shift+wheel y zoom: ${ydraw.toFixed(1)} ms`);
  worst = Math.max(worst, deep, spanMs, ydraw);
  // Pans: drag the timeline left and right at the whole run (every event in
  // view) and zoomed in to a hundredth of it in the middle (y fits again).
  await page.selectOption('#ymode', 'fit');
  const drag = async (dx) => {
    const k = await page.evaluate(() => window.__vt.drawCount);
    const y = box.y + box.height / 2, x = box.x + box.width / 2;
    await page.mouse.move(x, y);
    await page.mouse.down();
    await page.mouse.move(x + dx / 2, y);
    await page.mouse.move(x + dx, y);
    await page.mouse.up();
    const [ms] = await redrawn(k);
    return ms;
  };
  const pans = [];
  for (const zoom of [1, 100]) {
    await page.evaluate(([z, v0, v1]) => {
      const mid = (v0 + v1) / 2, half = (v1 - v0) / 2 / z;
      window.__vt.zoomTo(mid - half, mid + half);
    }, [zoom, ...full]);
    for (const dx of [-300, 300, 300, -300]) pans.push(await drag(dx));
  }
  const worstPan = Math.max(...pans);
  console.log(`drag pans (whole run, a hundredth of it): ${pans.map((x) => x.toFixed(1)).join(' ')} ms`);
  worst = Math.max(worst, worstPan);
  console.log(`slowest redraw: ${worst.toFixed(1)} ms`);
  console.log('slowest_redraw_ms=' + worst.toFixed(1));
  if (errors.length) { console.error('page errors: ' + errors.join(' | ')); process.exitCode = 1; }
  console.log('first_paint_s=' + (fp / 1000).toFixed(3));
} finally {
  await ctx.close();
  rmSync(profile, { recursive: true, force: true });
}
