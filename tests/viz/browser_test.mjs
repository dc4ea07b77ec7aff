// tests/viz/browser_test.mjs - the timeline page in a real headless Chromium.
//
// Usage: node browser_test.mjs TEST_NAME   (meson runs one process per test)
// Environment (set by tests/viz/meson.build): VT_CLI (vramtrace), VT_GEN
// (gen_snapshot), VT_ARTIFACTS (screenshots and pages go there),
// VT_VIZ_TESTS (this folder, for node_modules).
//
// The pages are made from gen_snapshot's snapshots; those of real torch
// programs are browser_torch_test.mjs's. The browser, the checks every test
// makes (no network request, no console error) and the runner:
// browser_lib.mjs.

import { execFileSync } from 'node:child_process';
import { join } from 'node:path';

import { artifacts, canvasStats, check, checkJson, checkText, clickLifetime, hoverTip, makePage, open, runTest, shot, until, viz, wheelAt, withPage } from './browser_lib.mjs';

/* `vramtrace viz A B -o TAG.html` of two snapshots gen_snapshot `kind`
 * makes (ranks TAG_a and TAG_b), opened once the overview has both curves;
 * ``body(page)``, then no network request and no error in the page. */
async function withRanksPage(tag, kind, body) {
  const a = join(artifacts, tag + '_a.vtsnap'), b = join(artifacts, tag + '_b.vtsnap');
  execFileSync(process.env.VT_GEN, [kind, a], { stdio: 'pipe' });
  execFileSync(process.env.VT_GEN, [kind, b], { stdio: 'pipe' });
  const html = join(artifacts, tag + '.html');
  execFileSync(process.env.VT_CLI, ['viz', a, b, '-o', html, '-q'], { stdio: 'pipe' });
  const opened = await open(html, () => document.querySelectorAll('#overview polyline').length === 2);
  try {
    await body(opened.page);
    opened.verifyQuiet();
  } finally {
    await opened.close();
  }
}

const tests = {
  async page_loads_offline() {
    await withPage(makePage('page_loads_offline', false), async (page, { requests, url }) => {
      const st = await canvasStats(page, 'tl');
      check(st.drawn > 5000, 'timeline canvas mostly empty: ' + JSON.stringify(st));
      check(st.colours >= 6, 'timeline has too few colours (bands by call site): ' + JSON.stringify(st));
      const info = await page.evaluate(() => ({ n: window.__vt.nLifetimes, e: window.__vt.nEvents,
        stats: document.getElementById('stats').textContent, fp: window.__vt.firstPaintMs }));
      check(info.n > 20, 'too few allocations decoded: ' + info.n);
      check(/peak allocated/.test(info.stats), 'header stats missing: ' + info.stats);
      check(/24\.0 MiB of managed memory alive, not served by the cache/.test(info.stats), 'header lacks the uncached bytes: ' + info.stats);
      const rows = await page.evaluate(() => window.__vt.uncachedRows());
      check(rows.some((r) => r.startsWith('managed') && r.includes('24.0 MiB in 1')), 'no managed row: ' + JSON.stringify(rows));
      check(rows.some((r) => r.startsWith('pinned host') && r.includes('0 B in 0')), 'no pinned host row: ' + JSON.stringify(rows));
      check(rows.some((r) => r.includes('24.0 MiB') && r.includes('make_managed_grid')), 'alive managed grid not listed: ' + JSON.stringify(rows));
      check(requests.length >= 1 && requests[0] === url, 'the page itself was not the first request');
      // No Python frames: nothing to fold, no toggle.
      check(await page.evaluate(() => document.getElementById('flame-all').parentNode.hidden), 'fold toggle shown without Python frames');
      console.log('first paint ' + info.fp.toFixed(0) + ' ms, ' + info.n + ' allocations, ' + info.e + ' events');
      await shot(page, 'page_loads_offline');
    });
  },

  async hover_and_click() {
    await withPage(makePage('hover_and_click', false), async (page) => {
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
      await until(page, () => document.getElementById('detail').textContent.includes('Allocation stack'));
      const detail = await page.textContent('#detail');
      for (const fn of ['make_weights', 'setup', 'main', 'train.py', '8388608 B', 'never (alive at the end)']) {
        check(detail.includes(fn), 'detail panel lacks "' + fn + '": ' + detail);
      }
      // An activation: freed, so its free stack is shown too.
      const d2 = await clickLifetime(page, 'act2', 'act2');
      check(d2.includes('Linear.forward') && d2.includes('free_activations'), 'act2 stacks wrong: ' + d2);
      const top = await page.textContent('#top');
      check(top.includes('act2') && top.includes('fc1.weight'), 'table at the clicked moment lacks act2/fc1.weight: ' + top);
      await shot(page, 'hover_and_click');
    });
  },

  async check_findings() {
    await withPage(makePage('check_findings', true), async (page) => {
      const text = await page.textContent('#findings');
      check(/linger/.test(text) && /cache\.1/.test(text), 'findings panel lacks the leak: ' + text);
      // The part of the leaked bands after their last use is hatched red.
      const st = await canvasStats(page, 'tl', [0xd3, 0x2f, 0x2f]);
      check(st.match > 50, 'no hatched (red) band on the timeline: ' + JSON.stringify(st));
      await page.click('#findings .finding');
      await until(page, () => document.getElementById('detail').textContent.includes('Checker finding'));
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
    });
  },

  async views_and_zoom() {
    await withPage(makePage('views_and_zoom', false), async (page) => {
      await until(page, () => document.getElementById('flame-label').textContent.length > 0);
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
      await until(page, (n) => window.__vt.drawCount > n, before[2]);
      const after = await page.evaluate(() => [window.__vt.view.v0, window.__vt.view.v1, window.__vt.drawCount, window.__vt.lastDrawMs]);
      check(after[1] - after[0] < (before[1] - before[0]) / 3, 'wheel did not zoom: ' + before + ' -> ' + after);
      // the redraw's speed is measured by tests/bench/bench_viz.mjs, not asserted here
      check(after[3] >= 0, 'no redraw time recorded: ' + after[3]);
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
      await until(page, () => window.__vt.view.mode === 'event');
      await page.click('#reset');
      await page.waitForTimeout(50);
      const st = await canvasStats(page, 'tl');
      check(st.drawn > 5000, 'event-index timeline empty: ' + JSON.stringify(st));
      // Marks are labelled.
      const marks = await page.evaluate(() => document.getElementById('vt-meta').textContent.includes('step 3'));
      check(marks, 'marks missing from the data');
      await shot(page, 'views_and_zoom');
    });
  },

  // Level of detail on 20000 small allocations from one call site
  // (gen_snapshot many): zoomed out they are one summary band per site whose
  // tooltip says so; zoomed in each one is its own exact band.
  async lod_aggregate_then_exact() {
    await withPage(makePage('lod_aggregate_then_exact', false, 'many'), async (page) => {
      const lod0 = await page.evaluate(() => window.__vt.lod);
      check(lod0.summary > 100, 'zoomed out, no summary bands: ' + JSON.stringify(lod0));
      const tok = await page.evaluate(() => window.__vt.findLifetime('tok.10000'));
      check(tok >= 0, 'tok.10000 not decoded');
      check(await page.evaluate((l) => window.__vt.locate(l), tok) === null,
        'zoomed out, tok.10000 is drawn as an exact band');
      const sp = await page.evaluate(() => window.__vt.locateSummary('Tokenizer.encode'));
      check(sp && sp.px >= 4, 'no summary band for Tokenizer.encode: ' + JSON.stringify(sp));
      const tip = await hoverTip(page, sp.x, sp.y);
      const m = /([\d,]+) allocations from Tokenizer\.encode \(model\.py:\d+\), ([\d.]+) MiB alive here/.exec(tip);
      check(m, 'summary tooltip: ' + tip);
      const n = +m[1].replace(/,/g, ''), mib = +m[2];
      check(n >= 30 && n <= 41, 'summary count: ' + tip);           // 40 alive, fewer near the start
      check(Math.abs(mib - n * 0.25) < 0.01, 'summary bytes != count x 256 KiB: ' + tip);
      check(/aggregate/.test(tip), 'tooltip does not say it is an aggregate: ' + tip);
      // The other sites have their own summary bands, in their colours.
      const st = await canvasStats(page, 'tl');
      check(st.colours >= 6, 'too few colours: ' + JSON.stringify(st));
      await shot(page, 'lod_zoomed_out');
      // A click on the summary explains it in the detail panel.
      await page.mouse.click(sp.x, sp.y);
      await until(page, (t) => document.getElementById('detail').textContent.includes(t), 'aggregate');
      check((await page.textContent('#detail')).includes('Tokenizer.encode'), 'aggregate detail lacks the call site');

      // Zoom in with the wheel on tok.10000 until it is an exact band.
      const box = await page.locator('#tl').boundingBox();
      for (let i = 0; i < 14; i++) {
        const x = await page.evaluate((l) => window.__vt.clientXOf(window.__vt.startOf(l)), tok);
        await wheelAt(page, Math.min(box.x + box.width - 20, Math.max(box.x + 80, x)), box.y + box.height / 2, -400, 1);
        if (await page.evaluate((l) => window.__vt.locate(l), tok)) break;
      }
      const pos = await page.evaluate((l) => window.__vt.locate(l), tok);
      check(pos, 'zoomed in, tok.10000 is still not an exact band: ' + JSON.stringify(await page.evaluate(() => [window.__vt.view.v0, window.__vt.view.v1, window.__vt.lod])));
      const lod1 = await page.evaluate(() => window.__vt.lod);
      check(lod1.exact > lod0.exact * 2, 'zooming in did not add exact bands: ' + JSON.stringify([lod0, lod1]));
      const tip2 = await hoverTip(page, pos.x, pos.y);
      check(tip2.includes('tok.10000') && tip2.includes('256 KiB') && tip2.includes('Tokenizer.encode'),
        'exact band tooltip: ' + tip2);
      check(!/allocations from/.test(tip2), 'exact band tooltip reads like an aggregate: ' + tip2);
      await shot(page, 'lod_zoomed_in');
      await page.mouse.click(pos.x, pos.y);
      await until(page, (t) => document.getElementById('detail').textContent.includes(t), 'tok.10000');
      check((await page.textContent('#detail')).includes('262144 B'), 'detail of the exact band');
    });
  },

  // A long run (600k events, checked: hatched findings among the small
  // ones) zoomed out is drawn in window mode, from summaries (no exact
  // band but the long-lived ones), and pixel for pixel as the plain sweep
  // from the first event draws it, in both y modes; zoomed in, a draw that
  // starts from a checkpoint of the sweep shows the same bands as one that
  // walks every event before the window, a selected band included.
  async lod_window_and_checkpoints_draw_what_the_sweep_draws() {
    await withPage(makePage('lod_window', true, 'big', ['600000']), async (page) => {
      await until(page, () => window.__vt.checkpointsReady);
      const compare = (a, b) => page.evaluate(([v0, v1, modesA, modesB]) => {
        const vt = window.__vt;
        vt.lodModes(...modesA); vt.zoomTo(v0, v1);
        const x = vt.drawn(), lod = vt.lod;
        vt.lodModes(...modesB); vt.zoomTo(v0, v1);
        const y = vt.drawn(), lodB = vt.lod;
        vt.lodModes(null, true);
        let differ = 0;
        for (let i = 0; i < x.ids.length; i++) if (x.ids[i] !== y.ids[i]) differ++;
        return { differ, sumsA: x.sum.length, sumSame: JSON.stringify(x.sum) === JSON.stringify(y.sum), lod, lodB,
          drawnA: x.ids.filter((id) => id !== 0).length };
      }, [a[0], a[1], a[2], b]);
      const full = await page.evaluate(() => window.__vt.fullRange);
      const at = (f0, f1) => [full[0] + (full[1] - full[0]) * f0, full[0] + (full[1] - full[0]) * f1];
      for (const ym of ['fit', 'span']) {
        await page.selectOption('#ymode', ym);
        const r = await compare([...at(0, 1), [null, true]], [false, false]);
        check(r.lod.window > 0, ym + ': zoomed out, the draw is not in window mode: ' + JSON.stringify(r.lod));
        check(r.lodB.window === 0, ym + ': the plain sweep was not forced: ' + JSON.stringify(r.lodB));
        check(r.lod.summary > 1000 && r.drawnA > 10000, ym + ': zoomed out, too little drawn from summaries: ' + JSON.stringify(r));
        check(r.differ === 0 && r.sumSame, ym + ': window mode and the plain sweep differ: ' + JSON.stringify(r));
      }
      // Deep in the run with y fitting the activity: the leaks under it are
      // thousands of exact bands; from a checkpoint or from the start.
      await page.selectOption('#ymode', 'span');
      const deep = at(0.8, 0.8004);
      const r = await compare([...deep, [null, true]], [false, false]);
      check(r.lod.window === 0 && r.lod.exact > 1000, 'zoomed in: no exact bands, or window mode: ' + JSON.stringify(r.lod));
      check(r.differ === 0 && r.sumSame, 'zoomed in: from a checkpoint and from the start differ: ' + JSON.stringify(r));
      // The same with one band selected (never summarized).
      const l = await page.evaluate(() => {
        const vt = window.__vt, p = vt.plotSize;
        for (let y = p.rows - 1; y >= 0; y--) { const id = vt.idAt(Math.floor(p.cols / 2), y); if (id >= 0) return id; }
        return -1;
      });
      check(l >= 0, 'zoomed in, nothing drawn mid-plot');
      await page.evaluate((k) => { window.__vt.view.selected = k; }, l);
      const rs = await compare([...deep, [null, true]], [false, false]);
      check(rs.differ === 0 && rs.sumSame, 'with a selection: from a checkpoint and from the start differ: ' + JSON.stringify(rs));
      const rw = await compare([...at(0, 1), [null, true]], [false, false]);
      check(rw.differ === 0 && rw.sumSame, 'with a selection, zoomed out: window mode and the plain sweep differ: ' + JSON.stringify(rw));
      await shot(page, 'lod_window');

      // The sweep's state itself, at and around its checkpoints (where a
      // draw starts from one) and further on: the same exact allocations in
      // the same order and the same sums per site whether it starts from a
      // checkpoint or from the first event, and in window mode.
      const bad = await page.evaluate(() => {
        const vt = window.__vt, ck = vt.checkpointPositions, nE = vt.nEvents;
        const lods = [{ minBytes: 8 << 20, minW: 1e6 }, { minBytes: 1 << 18, minW: 5e3 }, { minBytes: 1, minW: 0 }];
        const errs = [];
        let compared = 0;
        for (let i = 1; i < ck.length && errs.length < 5; i++) {
          const p = ck[i];
          // A draw resets at its first state: start just before, at and after the checkpoint.
          for (const d of [-2, -1, 0, 1]) for (const lod of lods) {
            const states = [p + d, p + d + 1, p + 97, p + 4099].filter((x) => x >= -1 && x < nE);
            const plain = JSON.stringify(vt.sweepStates(states, { ...lod, window: false, checkpoints: false }));
            for (const [w, c] of [[false, true], [true, true], [true, false]]) {
              compared++;
              if (JSON.stringify(vt.sweepStates(states, { ...lod, window: w, checkpoints: c })) !== plain) {
                errs.push({ p, lod, window: w, checkpoints: c });
              }
            }
          }
        }
        return { errs, compared, checkpoints: ck.length };
      });
      check(bad.checkpoints > 10 && bad.compared > 100, 'too few checkpoints compared: ' + JSON.stringify(bad));
      // A column's state from the curve's block maxima: the first highest
      // moment, as a walk over every event finds it (ranges of all lengths,
      // on and off block edges).
      const peaks = await page.evaluate(() => {
        const vt = window.__vt, nE = vt.nEvents, errs = [];
        let seed = 7;
        const rnd = (n) => { seed = (seed * 1103515245 + 12345) % 2147483648; return seed % n; };
        for (let i = 0; i < 400 && errs.length < 5; i++) {
          const e0 = rnd(nE), e1 = Math.min(nE, e0 + [1, 255, 256, 257, 511, 512, 513, 4096, 70000][i % 9] + rnd(3));
          let best = e0 - 1, bv = vt.allocAt(best);
          for (let e = e0; e < e1; e++) if (vt.allocAt(e) > bv) { bv = vt.allocAt(e); best = e; }
          if (vt.peakIn(e0, e1) !== best) errs.push([e0, e1, vt.peakIn(e0, e1), best]);
        }
        return errs;
      });
      check(peaks.length === 0, 'a column\'s peak differs from the walk over its events: ' + JSON.stringify(peaks));
      check(bad.errs.length === 0, 'the sweep differs from a checkpoint or in window mode: ' + JSON.stringify(bad));
    });
  },

  // The y axis fits the tallest allocated stack in the visible window (the
  // 200 MiB workspace is gone after the first tenth), stays put when locked,
  // and shift+wheel zooms bytes.
  async y_fit_and_lock() {
    await withPage(makePage('y_fit_and_lock', false, 'many'), async (page) => {
      const MiB = 1024 * 1024;
      const yr = () => page.evaluate(() => window.__vt.yRange);
      const r0 = await yr();
      check(!r0.locked && r0.y0 === 0 && r0.y1 > 230 * MiB && r0.y1 < 260 * MiB, 'initial y range: ' + JSON.stringify(r0));
      check(await page.inputValue('#ymode') === 'fit', 'y mode is not "fit" at the start');
      const box = await page.locator('#tl').boundingBox();
      const cx = box.x + box.width * 0.7, cy = box.y + box.height / 2;
      await wheelAt(page, cx, cy, -400, 3);
      const r1 = await yr();
      // The allocated bytes in view (26-30 MiB) fill it; the reserved line,
      // far above them in this never-reusing cache, leaves the top.
      check(r1.y1 < 36 * MiB && r1.y1 >= 28 * MiB, 'y did not fit the zoomed window: ' + JSON.stringify(r1));
      const lay1 = await page.evaluate(() => window.__vt.layout);
      check(lay1.reservedAbove > r1.y1, 'the reserved bytes above the plot are not reported: ' + JSON.stringify(lay1));
      const w = await page.evaluate(() => window.__vt.locate(window.__vt.findLifetime('embed.weight')));
      check(w, 'embed.weight not drawn after the y fit');
      await shot(page, 'y_fit_zoomed');

      // Fit activity: only the span of the allocated total in view (26-30 MiB).
      await page.selectOption('#ymode', 'span');
      await until(page, (m) => window.__vt.yRange.mode === m && window.__vt.yRange.y0 > 0, 'span');
      const rs = await yr();
      check(rs.y0 > 20 * MiB && rs.y1 < 32 * MiB, '"fit activity" range: ' + JSON.stringify(rs));
      await page.selectOption('#ymode', 'fit');
      await until(page, (y1) => window.__vt.yRange.y0 === 0 && window.__vt.yRange.y1 === y1, r1.y1);

      // Locked: zooming out again keeps the range.
      await page.selectOption('#ymode', 'lock');
      await until(page, (on) => window.__vt.yRange.locked === on, true);
      await wheelAt(page, cx, cy, 400, 3);
      const r2 = await yr();
      check(r2.locked && r2.y0 === r1.y0 && r2.y1 === r1.y1, 'locked y range changed: ' + JSON.stringify([r1, r2]));
      // Unlocked: it fits the (zoomed out) window again.
      await page.selectOption('#ymode', 'fit');
      await until(page, (min) => !window.__vt.yRange.locked && window.__vt.yRange.y1 > min, 200 * MiB);

      // shift+wheel zooms bytes around the cursor and locks.
      const before = await yr();
      await page.keyboard.down('Shift');
      await wheelAt(page, cx, box.y + box.height * 0.85, -400, 3);
      await page.keyboard.up('Shift');
      const r3 = await yr();
      check(r3.locked && r3.y1 - r3.y0 < (before.y1 - before.y0) / 2, 'shift+wheel did not zoom y: ' + JSON.stringify([before, r3]));
      check(await page.inputValue('#ymode') === 'lock', 'shift+wheel did not show y as locked');
      await shot(page, 'y_zoomed');
      // Reset fits again.
      await page.click('#reset');
      await until(page, (on) => window.__vt.yRange.locked === on, false);
      const help = await page.textContent('#help');
      check(/shift\+wheel/i.test(help) && /fit to view/.test(help) && /fit activity/.test(help) && /summary band/.test(help), 'help text: ' + help);
    });
  },

  // Degenerate snapshots (gen_snapshot empty|one|marks|huge): no script
  // error, nothing wider than its panel, canvases not stretched, the empty
  // case says so, the single allocation can be hovered and clicked, and
  // 2000-character names and mark labels are cut, not spilled.
  async edge_snapshots() {
    for (const kind of ['empty', 'one', 'marks', 'huge']) {
      await withPage(makePage('edge_' + kind, true, kind), async (page) => {
        await until(page, () => document.getElementById('top').textContent.length > 0);
        const lay = await page.evaluate(() => {
          const over = [];
          for (const el of document.querySelectorAll('.panel, header, .toolbar, #tooltip')) {
            if (el.hidden) continue;
            if (el.scrollWidth > el.clientWidth + 1) over.push((el.id || el.className) + ' ' + el.scrollWidth + '>' + el.clientWidth);
          }
          const doc = document.documentElement;
          if (doc.scrollWidth > window.innerWidth) over.push('page ' + doc.scrollWidth + '>' + window.innerWidth);
          const stretched = [];
          for (const c of document.querySelectorAll('canvas')) {
            const r = c.getBoundingClientRect();
            if (Math.abs(c.height - Math.round(r.height * devicePixelRatio)) > 1 ||
                Math.abs(c.width - Math.round(r.width * devicePixelRatio)) > 1) {
              stretched.push(c.id + ' ' + c.width + 'x' + c.height + ' in ' + r.width + 'x' + r.height);
            }
          }
          return { over, stretched, top: document.getElementById('top').textContent };
        });
        check(lay.over.length === 0, kind + ': content wider than its box: ' + lay.over.join('; '));
        check(lay.stretched.length === 0, kind + ': canvas stretched: ' + lay.stretched.join('; '));
        const n = await page.evaluate(() => window.__vt.nLifetimes);
        if (kind === 'empty' || kind === 'marks') {
          check(n === 0, kind + ': ' + n + ' allocations');
          check(/0 allocations alive/.test(lay.top), kind + ': table: ' + lay.top);
        }
        if (kind === 'one') {
          check(/1 allocation alive/.test(lay.top), 'one: table says: ' + lay.top);
          const pos = await page.evaluate(() => window.__vt.locate(window.__vt.findLifetime('the.only')));
          check(pos, 'one: the only allocation is not drawn');
          const tip = await hoverTip(page, pos.x, pos.y);
          check(tip.includes('the.only') && tip.includes('3.00 MiB') && tip.includes('only_alloc'), 'one: tooltip: ' + tip);
          await page.mouse.click(pos.x, pos.y);
          await until(page, () => document.getElementById('detail').textContent.includes('3145728 B'));
        }
        if (kind === 'huge') {
          const l = await page.evaluate(() => window.__vt.findLifetime('huge_' + 'x'.repeat(1995)));
          check(l >= 0, 'huge: the long name was not decoded whole');
          const pos = await page.evaluate((k) => window.__vt.locate(k), l);
          check(pos, 'huge: allocation not drawn');
          const tip = await hoverTip(page, pos.x, pos.y);
          check(tip.length < 1200 && tip.includes('\u2026'), 'huge: tooltip not cut: ' + tip.length + ' chars');
          const tipBox = await page.evaluate(() => { const t = document.getElementById('tooltip'); return [t.scrollWidth, t.clientWidth]; });
          check(tipBox[0] <= tipBox[1] + 1, 'huge: tooltip text spills: ' + tipBox);
          await page.click('#findings .finding');
          await until(page, () => document.getElementById('detail').textContent.includes('Checker finding'));
          const det = await page.evaluate(() => { const d = document.getElementById('detail'); return [d.scrollWidth, d.clientWidth]; });
          check(det[0] <= det[1] + 1, 'huge: detail panel spills sideways: ' + det);
        }
        await shot(page, 'edge_' + kind);
      });
    }
  },

  // gen_snapshot python: the icicle folds the interpreter's native frames
  // and torch's dispatch plumbing by default, as `vramtrace leaks` does (so
  // forward, reached through two eval-loop call sites, is one box); the
  // "show interpreter and dispatch frames" toggle brings them back; Python
  // frames say where their function is defined; a call site inside a
  // framework names its line too.
  async python_frames_fold_in_the_icicle() {
    await withPage(makePage('python_frames_fold_in_the_icicle', false, 'python'), async (page) => {
      await until(page, () => window.__vt.flameBoxes().length > 0);
      // The peak table: a block made inside a framework the program's line
      // called names that line, then the framework's, in its call site (as
      // summary and oom name it); one made by torch alone, the line only.
      const sites = await page.evaluate(() => Object.fromEntries(Array.from(
        document.querySelectorAll('#top tr.row')).map((r) => [r.querySelector('.name').textContent,
        r.querySelector('.site').textContent])));
      check(sites['logits.all'] === 'step (train.py:30), inside: torch_pad_and_concatenate (trainer_pt_utils.py:86)',
        'a framework\'s call site: ' + JSON.stringify(sites));
      check(sites['act.a'] === 'forward (model.py:88)', 'a torch call site: ' + JSON.stringify(sites));
      const toggle = await page.evaluate(() => {
        const t = document.getElementById('flame-all'), r = t.parentNode.getBoundingClientRect();
        return { hidden: t.parentNode.hidden, w: r.width, h: r.height, checked: t.checked, text: t.parentNode.textContent };
      });
      check(!toggle.hidden && toggle.w > 20 && toggle.h > 5 && !toggle.checked, 'toggle not visible or not off: ' + JSON.stringify(toggle));
      const names = async () => (await page.evaluate(() => window.__vt.flameBoxes())).map((b) => b.fn);
      const count = (list, fn) => list.filter((n) => n === fn).length;
      const folded = await names();
      for (const fn of ['<module>', 'step', 'forward', 'at::empty', 'at::zeros', 'torch::autograd::Engine::thread_main'])
        check(folded.includes(fn), 'folded icicle lacks ' + fn + ': ' + folded);
      // _start is the python executable's own: the interpreter's too
      for (const fn of ['_start', '_PyEval_EvalFrameDefault', 'Py_RunMain', '_PyObject_Vectorcall', '_call_impl', '_wrapped_call_impl'])
        check(!folded.includes(fn), 'folded icicle shows ' + fn + ': ' + folded);
      check(count(folded, 'forward') === 1, 'forward is not one box when folded: ' + folded);
      // a stack with no Python frame keeps its interpreter frames, as in leaks
      check(folded.includes('pythread_wrapper'), 'a stack without Python frames was folded: ' + folded);
      // The box of forward holds both activations (24 + 8 MiB).
      const fwd = (await page.evaluate(() => window.__vt.flameBoxes())).find((b) => b.fn === 'forward');
      check(fwd.bytes === 32 * 1024 * 1024, 'forward box bytes: ' + fwd.bytes);
      const tip = await hoverTip(page, fwd.x, fwd.y);
      check(tip.includes('model.py:88 (def at line 80)'), 'forward tooltip: ' + tip);
      await shot(page, 'python_frames_folded');

      await page.click('#flame-all');
      await until(page, () => window.__vt.flameBoxes().some((b) => b.fn === '_PyEval_EvalFrameDefault'));
      const all = await names();
      for (const fn of ['_start', '_PyEval_EvalFrameDefault', 'Py_RunMain', '_PyObject_Vectorcall', '_call_impl', '_wrapped_call_impl', 'forward'])
        check(all.includes(fn), 'all frames: icicle lacks ' + fn + ': ' + all);
      check(count(all, 'forward') === 2, 'all frames: forward is not two boxes: ' + all);
      check(all.length > folded.length, 'all frames drew no more boxes');
      await shot(page, 'python_frames_all');
      await page.click('#flame-all');
      await until(page, () => !window.__vt.flameBoxes().some((b) => b.fn === '_PyEval_EvalFrameDefault'));
      check((await names()).join() === folded.join(), 'folding again did not give the same icicle');

      // The detail panel's stack folds the same frames and names the def line.
      const detail = await clickLifetime(page, 'act.a', 'Allocation stack');
      check(detail.includes('model.py:88 (def at line 80)') && detail.includes('train.py:30 (def at line 28)'), 'detail lacks def lines: ' + detail);
      check(!detail.includes('_PyEval_EvalFrameDefault') && /interpreter and dispatch frames hidden/.test(detail), 'detail does not fold: ' + detail);
      check(!detail.includes('def at line 1)'), 'the module\'s top level names a def line: ' + detail);
      // The program's own lines first, innermost first, as leaks and check show them;
      // the libraries' and native frames under one line that opens.
      const first = await page.evaluate(() => document.querySelector('#detail ol.stack li').textContent);
      check(first.includes('model.py:88'), 'the stack does not lead with the program\'s line: ' + first);
      check(/library and native frames under them/.test(detail), 'no folded rest: ' + detail);
    });
  },

  // A CPU-only track() run (cpu_track.py: six CPU tensors, one freed in its
  // step): its storages are drawn in their own lane, named as the checker
  // names them (the line that made them), with a tooltip and a detail
  // panel; the device timeline says where they went.
  async first_view_shows_the_run() {
    const snap = join(artifacts, 'first_view.vtsnap');
    execFileSync(process.env.VT_GEN, ['run', snap], { stdio: 'pipe' });
    const html = viz(snap, join(artifacts, 'first_view.html'), ['--check']);
    const groups = checkJson(snap).groups;
    check(groups.length === 1 && groups[0].count >= 20, 'check groups: ' + JSON.stringify(groups));
    await withPage(html, async (page) => {
      const lay = await page.evaluate(() => window.__vt.layout);
      const share = Math.min(1, lay.stepsTo) - Math.max(0, lay.stepsFrom);
      check(share >= 0.7, 'the marked steps take ' + (100 * share).toFixed(1) + '% of the width: ' + JSON.stringify(lay));
      check(lay.leftOut > 0, 'the events left of the first view are not counted: ' + JSON.stringify(lay));
      check(lay.allocTop >= 0.5, 'the allocated peak is drawn in the lower half: ' + JSON.stringify(lay));
      check(lay.reservedAbove > 0, 'the reserved bytes above the plot are not said: ' + JSON.stringify(lay));
      // Bands, not only the axis range: a drawn allocation in the upper half.
      const top = await page.evaluate(() => {
        const v = window.__vt, rows = v.plotSize.rows, cols = v.plotSize.cols;
        for (let y = 0; y < rows; y++) for (let x = 0; x < cols; x += 3) if (v.idAt(x, y) >= 0) return y / rows;
        return 1;
      });
      check(top < 0.5, 'the bands stay in the lower half (top at ' + top.toFixed(2) + ' of the plot from its top)');
      const h = await page.evaluate(() => [document.getElementById('ext-wrap').getBoundingClientRect().height,
        document.getElementById('tl-wrap').getBoundingClientRect().height]);
      check(h[0] > 0 && h[0] <= 0.25 * h[1], 'the 112-byte CPU lane is ' + h[0] + ' px tall next to ' + h[1] + ' px');
      const entries = await page.$$eval('#findings > .finding, #findings > details', (e) => e.map((x) => x.textContent));
      check(entries.length === groups.length, 'findings entries: ' + entries.length + ' for ' + groups.length + ' cause(s)');
      check(entries[0].includes(groups[0].count + ' \u00d7') && entries[0].includes('logits'), 'the group entry: ' + entries[0]);
      // 1 MiB tensors in 1 MiB blocks: no word of blocks (small_results_say_their_blocks)
      check(!entries[0].includes('of blocks'), 'the group entry speaks of blocks: ' + entries[0]);
      check((await page.textContent('#nfindings')).includes('from 1 cause'), 'findings count: ' + await page.textContent('#nfindings'));
      // Expanded, it lists every finding of the group; one click selects it.
      await page.click('#findings > details > summary');
      await until(page, (n) => document.querySelectorAll('#findings details[open] > div.finding').length === n, groups[0].count);
      await shot(page, 'first_view_shows_the_run');
      // "show all" brings back the quiet start.
      await page.click('#all');
      await until(page, () => window.__vt.layout && window.__vt.layout.leftOut === 0);
      const all = await page.evaluate(() => window.__vt.layout);
      check(all.stepsTo - all.stepsFrom < 0.3, 'show all: ' + JSON.stringify(all));
    });
  },

  // Small results kept a step (gen_snapshot run with logits of 1,600 bytes,
  // each in a block of 2,048): their cause's entry says the blocks they
  // hold as `vramtrace check` does, which is what put them over check's
  // floor (43.75 KiB asked for, 56 KiB of blocks, against a floor of 47.1);
  // a call site's finding of them says its blocks too; 4-byte ones stay
  // under the floor, and the panel says so in a line.
  async small_results_say_their_blocks() {
    const snap = join(artifacts, 'small_results.vtsnap');
    execFileSync(process.env.VT_GEN, ['run', snap, '1600'], { stdio: 'pipe' });
    const html = viz(snap, join(artifacts, 'small_results.html'), ['--check']);
    const rep = checkJson(snap);
    const g = rep.groups;
    check(g.length === 1 && g[0].held_bytes === 2048 * g[0].count && g[0].bytes === 1600 * g[0].count &&
          g[0].bytes < rep.min_bytes && rep.min_bytes < g[0].held_bytes, 'check: ' + JSON.stringify([g, rep.min_bytes]));
    check(checkText(snap).includes(' × [linger] 43.75 KiB in 56 KiB of blocks (1.56 KiB each on average)'),
          'check text: ' + checkText(snap));
    await withPage(html, async (page) => {
      const entry = await page.textContent('#findings > details > summary');
      check(entry.includes(g[0].count + ' findings from one cause, 43.8 KiB in all, in 56.0 KiB of blocks (1.56 KiB each on average)'),
            'the group entry: ' + entry);
      check(!(await page.textContent('#findings')).includes('minor'), 'minor findings said where check has none');
    });
    // One finding of a call site's many blocks (never-freed asked for) says
    // them in its title as check's report does ("(blocks X) in N allocations").
    const nf = checkText(snap, ['--rules', 'never-freed']);
    const m = /, ([\d.]+ KiB) \(blocks ([\d.]+ KiB)\) in (\d+) allocations/.exec(nf);
    check(m && +m[3] >= 20, 'check --rules never-freed: ' + nf);
    await withPage(viz(snap, join(artifacts, 'small_results_nf.html'), ['--rules', 'never-freed']), async (page) => {
      const text = await page.textContent('#findings');
      check(text.includes(m[3] + ' allocations (' + m[1] + ' in ' + m[2] + ' of blocks) from one call site'), 'the finding: ' + text);
    });
    // A loss of 4 bytes kept a step: under the floor, blocks and all. The
    // page has no finding to show, and says, as check does, what it left out.
    const minorSnap = join(artifacts, 'minor_results.vtsnap');
    execFileSync(process.env.VT_GEN, ['run', minorSnap, '4'], { stdio: 'pipe' });
    const minorRep = checkJson(minorSnap);
    check(minorRep.findings.length === 0 && minorRep.minor.length >= 20, 'check: ' + JSON.stringify(minorRep.minor.length));
    const n = minorRep.minor.length;
    await withPage(viz(minorSnap, join(artifacts, 'minor_results.html'), ['--check']), async (page) => {
      const text = await page.textContent('#findings');
      check(text.startsWith('none') && text.includes(n + ' minor findings (' + 4 * n + ' B, in ' + (n / 2).toFixed(1) +
            ' KiB of blocks) under the floor of ' + (minorRep.min_bytes / 1024).toFixed(1) + ' KiB: not shown (vramtrace check --min-bytes 0 lists them)'),
            'the findings panel: ' + text);
    });
  },

  // A run that observed PyTorch's allocator (gen_snapshot observed): the
  // header says how much device memory the allocator did not hand out
  // (cuBLAS's own workspaces: three, at most 40 MiB alive at once) and the
  // kind of the memory the cache never served (pinned host), each with its
  // bytes, as two different things. Before: "3 allocations outside the
  // framework's pool" (no bytes, read as more allocations) beside "3.00 MiB alive
  // not served by the cache" (no kind), which read alike.
  async observed_run_says_what_is_outside_the_pool() {
    const html = makePage('observed', false, 'observed');
    await withPage(html, async (page) => {
      const stats = await page.textContent('#stats');
      check(stats.includes("7 allocations · 13 events · 3 of them outside PyTorch's allocator, at most 40.0 MiB " +
            "at once (libraries' own, as cuBLAS's workspaces: in reserved, not drawn)"), 'outside the pool: ' + stats);
      check(stats.includes('3.00 MiB of pinned host memory alive, not served by the cache'), 'uncached: ' + stats);
      // PyTorch's cuBLASLt workspace, a block of its pool no tensor owns, is
      // named as a library's own where the tensors are named by their names
      const names = await page.$$eval('#top td.name', (tds) => tds.map((t) => t.textContent));
      check(names.includes('library workspace: at::cuda::getCUDABlasLtWorkspace()'), 'the workspace: ' + JSON.stringify(names));
      check(names.filter((n) => n === 'activation').length === 3, 'the tensors: ' + JSON.stringify(names));
      await shot(page, 'observed_run');
    });
  },

  // A run that marked no step but stepped its parameters by hand: its
  // backward passes' ends are its steps, as `check` judges them, drawn as
  // marks and numbered; a run with marks draws its own.
  async steps_by_hand_are_the_ends_of_the_backward_passes() {
    const html = makePage('by_hand', false, 'by_hand');
    await withPage(html, async (page) => {
      const labels = await page.evaluate(() => window.__vt.markLabels());
      check(JSON.stringify(labels) === JSON.stringify(['backward 1', 'backward 2', 'backward 3', 'backward 4']),
        'the steps drawn: ' + JSON.stringify(labels));
      await shot(page, 'steps_by_hand');
    });
    await withPage(makePage('marks_drawn', false), async (page) => {
      const labels = await page.evaluate(() => window.__vt.markLabels());
      check(labels.length > 0 && labels.every((l) => !l.startsWith('backward ')), 'the marks drawn: ' + JSON.stringify(labels));
    });
  },

  // The tool's pauses (track()'s holder walks: PAUSE events) are time the
  // program did not run: on the time axis each is a grey band as wide as
  // it lasted, said in the legend; on the event axis, where a pause has no
  // width, none. Before, a run's first steps looked 100 ms long where the
  // walks had paused them (a Hugging Face Trainer's, run --track).
  async the_tools_pauses_are_shaded_on_the_time_axis_and_said() {
    const html = makePage('paused', false, 'paused');
    await withPage(html, async (page) => {
      const bands = await page.evaluate(() => window.__vt.pauseBands());
      check(bands.length === 2, 'pause bands drawn: ' + JSON.stringify(bands));
      const w = bands.map(([a, b]) => b - a);
      check(w[0] > 1.7 * w[1] && w[0] < 2.3 * w[1], 'a 40 ms pause is not twice a 20 ms one: ' + JSON.stringify(w));
      check(await page.evaluate(() => !document.querySelector('.pause-legend').hidden), 'the legend says nothing of pauses');
      await shot(page, 'pauses');
      await page.click('#xmode');
      await until(page, () => window.__vt.view.mode === 'event');
      await page.waitForTimeout(50);
      const none = await page.evaluate(() => window.__vt.pauseBands());
      check(none.length === 0, 'pauses drawn on the event axis: ' + JSON.stringify(none));
    });
    await withPage(makePage('no_pauses', false), async (page) => {
      check(await page.evaluate(() => document.querySelector('.pause-legend').hidden), 'a legend for pauses that are not there');
      check((await page.evaluate(() => window.__vt.pauseBands())).length === 0, 'pauses drawn where none were recorded');
    });
  },

  // `vramtrace viz A B` of two ranks that track() paused (40 and 20 ms
  // each): the overview shades each pause in grey, as wide as it lasted,
  // and its legend says what the grey is; each rank's page shades them too.
  // Before, the overview drew a pause as the program's own flat stretch.
  async ranks_shade_the_tools_pauses_in_the_overview() {
    await withRanksPage('ranks_paused', 'paused', async (page) => {
      const bands = await page.evaluate(() => Array.from(document.querySelectorAll('#overview rect.pause'),
        (r) => [r.dataset.rank, +r.getAttribute('width'), r.querySelector('title').textContent]));
      check(bands.length === 4, 'pause bands in the overview: ' + JSON.stringify(bands));
      for (const rank of new Set(bands.map((x) => x[0]))) {
        const w = bands.filter((x) => x[0] === rank).map((x) => x[1]);
        check(w.length === 2 && w[0] > 1.7 * w[1] && w[0] < 2.3 * w[1],
          'rank ' + rank + ': a 40 ms pause is not twice a 20 ms one: ' + JSON.stringify(w));
      }
      check(/vramtrace paused 40(\.0)? ms/.test(bands[0][2]), 'a band says: ' + bands[0][2]);
      check(await page.evaluate(() => !!document.querySelector('#overview .pause-legend')),
        "the overview's legend says nothing of pauses");
      await shot(page, 'ranks_paused');
    });
  },

  // `vramtrace viz A B` of two snapshots without marks: the overview has
  // its axes and legend, and "first mark" says there are none.
  async ranks_without_marks_say_so() {
    await withRanksPage('ranks_without_marks', 'one', async (page) => {
      const opt = await page.$eval('#align option[value="mark"]', (o) => [o.disabled, o.textContent]);
      check(opt[0] && /no marks/.test(opt[1]), 'the "first mark" option: ' + JSON.stringify(opt));
      const n = await page.evaluate(() => [document.querySelectorAll('#overview .xlabel').length,
        document.querySelectorAll('#overview .ylabel').length, document.querySelectorAll('#overview .legend .item').length]);
      check(n[0] >= 3 && n[1] >= 2 && n[2] === 2, 'overview ticks and legend: ' + n);
      check(await page.evaluate(() => !document.querySelector('#overview rect.pause, #overview .pause-legend')),
        'pauses drawn or said where none were recorded');
      await shot(page, 'ranks_without_marks');
    });
  },

  // vramtrace viz --replay CONF: the replay's reserved bytes, dashed in
  // orange over the recorded ones, with a legend; none without --replay.
  async replay_overlay() {
    const snap = join(artifacts, 'replay_overlay.vtsnap');
    const plain = join(artifacts, 'replay_overlay_plain.html');
    const html = join(artifacts, 'replay_overlay.html');
    execFileSync(process.env.VT_GEN, ['small', snap], { stdio: 'pipe' });
    execFileSync(process.env.VT_CLI, ['viz', snap, '-o', plain, '-q'], { stdio: 'pipe' });
    execFileSync(process.env.VT_CLI, ['viz', snap, '-o', html, '-q', '--replay', 'roundup_power2_divisions:2'],
      { stdio: 'pipe' });
    const orange = [0xd9, 0x48, 0x0f];
    let base;
    {
      await withPage(plain, async (page) => {
        base = await canvasStats(page, 'tl', orange);
      });
    }
    await withPage(html, async (page) => {
      const st = await canvasStats(page, 'tl', orange);
      check(st.match > base.match + 200, 'no replayed curve drawn: ' + JSON.stringify([st, base]));
      const label = await page.evaluate(() => window.__vt && document.body.innerHTML.includes('roundup_power2_divisions:2'));
      check(label, 'the replayed settings are not on the page');
      // the reserved-bytes panel's tooltip gives both figures
      const box = await page.evaluate(() => { const r = document.getElementById('seg').getBoundingClientRect(); return { x: r.x, y: r.y, w: r.width, h: r.height }; });
      const tip = await hoverTip(page, box.x + box.w * 0.6, box.y + box.h * 0.5);
      check(tip.includes('replayed reserved'), 'tooltip lacks the replayed reserved bytes: ' + tip);
      await shot(page, 'replay_overlay');
    });
  },
  async oom_is_marked_and_explained() {
    // the segments plot draws a CUDA graph's pool within the reserved bytes
    // (violet) and its tooltip says how much of them it is
    async function graphPoolsInTheSegmentsPlot(page) {
      const box = await page.evaluate(() => { const r = document.getElementById('seg').getBoundingClientRect(); return { x: r.x, y: r.y, w: r.width, h: r.height }; });
      const tip = await hoverTip(page, box.x + box.w * 0.9, box.y + box.h * 0.5);
      check(tip.includes("of it, CUDA graphs' pools 64.0 MiB"), 'the segments tooltip: ' + tip);
      const violet = await page.evaluate(() => {
        const cv = document.getElementById('seg');
        const d = cv.getContext('2d').getImageData(0, 0, cv.width, cv.height).data;
        let n = 0;
        for (let i = 0; i < d.length; i += 4) if (d[i + 2] > d[i + 1] + 40 && d[i] > d[i + 1] + 10) n++;
        return n;
      });
      check(violet > 20, 'no violet pool band in the segments plot: ' + violet + ' pixels');
      check(await page.evaluate(() => !document.querySelector('.pool-legend').hidden), 'no legend for the pools');
      await shot(page, 'graph_pools');
    }
    // a run that ran out of memory: the OOM is a red line on the timeline
    // and the panel says what `vramtrace oom` says, fixes verified by replay
    const snap = join(artifacts, 'oom.vtsnap');
    const html = join(artifacts, 'oom.html');
    execFileSync(process.env.VT_GEN, ['oom', snap], { stdio: 'pipe' });
    viz(snap, html);
    const cli = JSON.parse(execFileSync(process.env.VT_CLI, ['oom', snap, '--json'], { stdio: 'pipe' }).toString());
    const red = [0xd3, 0x2f, 0x2f];
    await withPage(html, async (page) => {
      const oom = await page.evaluate(() => window.__vt.oom);
      check(oom && oom.size === 12 * 1024 * 1024 && oom.ax >= 0, 'no OOM on the page: ' + JSON.stringify(oom));
      const x = await page.evaluate(() => window.__vt.oomMarkerX());
      check(x != null, 'the OOM marker is not drawn');
      const col = await page.evaluate(([cx, c]) => {
        const cv = document.getElementById('tl');
        const r = cv.getBoundingClientRect();
        const px = Math.round((cx - r.left) * (cv.width / r.width));
        const d = cv.getContext('2d').getImageData(px, 0, 1, cv.height).data;
        let n = 0;
        for (let i = 0; i < d.length; i += 4) if (Math.abs(d[i] - c[0]) < 10 && Math.abs(d[i + 1] - c[1]) < 10 && Math.abs(d[i + 2] - c[2]) < 10) n++;
        return n;
      }, [x, red]);
      check(col > 50, 'the marker column has ' + col + ' red pixels');
      const text = await page.evaluate(() => window.__vt.oomPanelText());
      const hidden = await page.evaluate(() => document.getElementById('oom-panel').hidden);
      check(!hidden, 'the OOM panel is hidden');
      for (const want of ['12.0 MiB asked', 'forward', 'in pieces smaller than the request',
        'VRAMTRACE_CONF=expandable_segments:True', 'tried, would not fit', 'max_split_size_mb']) {
        check(text.includes(want), 'the panel lacks "' + want + '": ' + text);
      }
      // the same verdicts as the command's
      for (const f of cli.fixes) check(text.includes(f.conf), 'the panel lacks the fix ' + f.conf);
      check(cli.fixes.some((f) => f.verified && f.conf === 'expandable_segments:True'), JSON.stringify(cli.fixes));
      // "show the moment": the table lists what was alive at the OOM
      await page.click('#oom-go');
      await until(page, (ax) => document.getElementById('moment-label').textContent.includes('#' + ax), oom.ax);
      const rows = await page.evaluate(() => document.getElementById('top').textContent);
      check(rows.includes('14 allocations alive'), 'the table at the OOM: ' + rows);
      // a fragmented cache is no leak: nothing piled up
      check(!text.includes('piled up'), 'the fragmentation panel says something piled up: ' + text);
      await shot(page, 'oom');
    });
    // a line that kept memory step after step before the OOM: said on its line
    await withPage(makePage('oom_leak', false, 'oom_leak'), async (page) => {
      const text = await page.evaluate(() => window.__vt.oomPanelText());
      for (const want of ['keep_activation', 'check: never freed, 13 allocations',
        'piled up before the OOM: a fix for this request only moves the OOM later while it grows']) {
        check(text.includes(want), 'the panel lacks "' + want + '": ' + text);
      }
    });
    // a CUDA graph's private pool: said apart from the cache, with its
    // capture's line, and deleting the graph the verified fix
    await withPage(makePage('oom_graph', false, 'oom_graph'), async (page) => {
      const text = await page.evaluate(() => window.__vt.oomPanelText());
      for (const want of ['64.0 MiB held by a CUDA graph\'s private pool (32.0 MiB of it free), captured at',
        'capture_step', '0 B free in the cache', 'delete the CUDA graph before it']) {
        check(text.includes(want), 'the panel lacks "' + want + '": ' + text);
      }
      check(!text.includes('not verified') && !text.includes('no fix is verified'), text);
      await graphPoolsInTheSegmentsPlot(page);
    });
    // a request made during that graph's capture (format 1.15): said so,
    // and deleting the graph being captured is no fix
    await withPage(makePage('oom_graph_capture', false, 'oom_graph_capture'), async (page) => {
      const text = await page.evaluate(() => window.__vt.oomPanelText());
      check(/asked while a CUDA graph was being captured \(captured at [^)]*capture_step/.test(text) &&
        text.includes('which keeps what it takes as long as the graph lives'), 'the panel lacks the capture: ' + text);
      check(!text.includes('delete the CUDA graph before it'), text);
    });
    // the same pool a torch.cuda.MemPool the program made (an odd id):
    // named so, not a CUDA graph's
    await withPage(makePage('oom_mem_pool', false, 'oom_mem_pool'), async (page) => {
      const text = await page.evaluate(() => window.__vt.oomPanelText());
      for (const want of ['asked into a private pool the program made (torch.cuda.MemPool',
        'until the pool is deleted', '64.0 MiB held by a private pool the program made (32.0 MiB of it free)']) {
        check(text.includes(want), 'the panel lacks ' + JSON.stringify(want) + ': ' + text);
      }
      check(!text.includes('CUDA graph\'s private pool') && !text.includes('being captured'), text);
    });
    // the same pool on a page without an OOM (the streamed render's)
    await withPage(makePage('graph', false, 'graph'), graphPoolsInTheSegmentsPlot);
    // a page without an OOM has no panel (nor a pool's legend: no pool)
    const plain = makePage('oom_none', false);
    await withPage(plain, async (page) => {
      check(await page.evaluate(() => document.querySelector('.pool-legend').hidden), 'a pool legend without a pool');
      check(await page.evaluate(() => window.__vt.oom === null && document.getElementById('oom-panel').hidden),
        'a run without an OOM shows one');
    });
  },
};


await runTest(tests);
