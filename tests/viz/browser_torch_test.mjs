// tests/viz/browser_torch_test.mjs - the timeline page in a real headless
// Chromium, on the snapshots of real torch programs run under
// vramtrace.torch.track() on the CPU (tracked CPU storages, holder chains,
// tape findings). Helpers and the runner: browser_lib.mjs.
//
// Usage: node browser_torch_test.mjs TEST_NAME   (meson runs one process per
// test). tests/torch/meson.build sets VT_SIMRUN, VT_TEST_PYTHON,
// VRAMTRACE_LIB and PYTHONPATH for them; without those they skip.

import { join } from 'node:path';

import { artifacts, canvasStats, check, checkJson, checkText, expandFindings, here, hoverTip, pythonTests, runTest, runTorch, shot, until, viz, withPage } from './browser_lib.mjs';

const tests = {
  async cpu_storages_have_their_own_lane() {
    const snap = join(artifacts, 'cpu_track.vtsnap');
    const info = runTorch(join(here, 'cpu_track.py'), [snap]);
    await withPage(viz(snap, join(artifacts, 'cpu_track.html')), async (page) => {
      const facts = await page.evaluate(() => ({ n: window.__vt.nExternal, names: window.__vt.externalNames(),
        drawn: window.__vt.externalDrawn(), panel: !document.getElementById('ext-panel').hidden,
        label: document.getElementById('ext-label').textContent, stats: document.getElementById('stats').textContent }));
      check(facts.panel, 'the lane of tracked storages is hidden');
      check(facts.n === info.storages, 'page has ' + facts.n + ' external storages, the program made ' + info.storages);
      check(facts.drawn === info.storages, 'the lane drew ' + facts.drawn + ' of ' + info.storages + ' storages');
      check(new RegExp('\\b' + info.storages + ' on CPU').test(facts.label), 'lane label: ' + facts.label);
      check(new RegExp('\\b' + info.storages + '\\b tracked CPU storages').test(facts.stats), 'header: ' + facts.stats);
      const name = facts.names.find((n) => n.startsWith(info.largest));
      check(name, 'no storage named "' + info.largest + '...": ' + JSON.stringify(facts.names));
      const l = await page.evaluate((n) => window.__vt.findLifetime(n), name);
      const pos = await page.evaluate((k) => window.__vt.locateExternal(k), l);
      check(pos, 'the largest storage is not drawn in the lane');
      const tipText = await hoverTip(page, pos.x, pos.y);
      check(tipText.includes(info.largest) && tipText.includes('1.00 MiB') && tipText.includes('on CPU'), 'lane tooltip: ' + tipText);
      await page.mouse.click(pos.x, pos.y);
      await until(page, () => document.getElementById('detail').textContent.includes('on CPU'));
      const detail = await page.textContent('#detail');
      for (const want of [info.largest, '1048576 B', 'last use', 'never (alive at the end)', 'cpu_track.py'])
        check(detail.includes(want), 'detail lacks "' + want + '": ' + detail);
      const tlText = await page.evaluate(() => window.__vt.nLifetimes);
      check(tlText === 0, 'external storages counted as device allocations: ' + tlText);
      await shot(page, 'cpu_storages_have_their_own_lane');
    });
  },

  // A finding on an external storage (leak_shapes.py cycle, on the CPU):
  // clicking it in the findings list selects the storage in the lane and
  // shows every holder chain as `vramtrace check` prints it, the cycle
  // marked, and that a reference cycle held it until gc ran.
  async external_finding_shows_its_holder_chain() {
    const snap = join(artifacts, 'cpu_cycle.vtsnap');
    runTorch(join(pythonTests, 'leak_shapes.py'), ['cycle', 'leak', snap]);
    const rep = checkJson(snap);
    const cyc = rep.findings.findIndex((f) => f.external && f.paths.some((p) => p.cycle));
    check(cyc >= 0, 'the checker found no external storage held by a cycle: ' + JSON.stringify(rep.findings.map((f) => f.rule)));
    const want = rep.findings[cyc];
    await withPage(viz(snap, join(artifacts, 'cpu_cycle.html'), ['--check']), async (page) => {
      const nGroups = await page.$$eval('#findings > .finding, #findings > details', (f) => f.length);
      check(nGroups === rep.groups.length, 'findings entries: ' + nGroups + ', checker\'s causes: ' + rep.groups.length);
      await expandFindings(page);
      const nItems = await page.$$eval('#findings div.finding', (f) => f.length);
      check(nItems === rep.findings.length, 'findings listed: ' + nItems + ', checker: ' + rep.findings.length);
      // Each finding keeps its place in the checker's order (the list is
      // redrawn on every selection: click by that place).
      const item = (k) => '#findings div.finding[data-f="' + k + '"]';
      await page.click(item(cyc));
      await until(page, () => document.getElementById('detail').textContent.includes('Checker finding'));
      const detail = await page.textContent('#detail');
      // as the text report prints them: runs of the same hop folded
      const addr = want.paths[0].steps[want.paths[0].steps.length - 1].id;
      const lines = checkText(snap).split('\n').map((l) => l.trim())
        .filter((l) => l.includes('\u2192 storage ' + addr + ' '));
      check(lines.length >= want.paths.length, 'the report prints ' + lines.length + ' chains to ' + addr + ', the JSON has ' + want.paths.length);
      for (const l of lines) check(detail.includes(l), 'detail lacks the chain "' + l + '": ' + detail);
      check(/\(cycle\) Peer\.peer( ×\d+)? → /.test(detail), 'cycle marker missing: ' + detail);
      check(detail.includes('held by a reference cycle until gc ran'), 'gc cause missing: ' + detail);
      check(detail.includes('on CPU'), 'the external storage is not selected: ' + detail);
      const sel = await page.evaluate(() => window.__vt.view.selected);
      check(sel >= 0 && await page.evaluate((l) => window.__vt.isExternal(l), sel), 'selection is not an external storage: ' + sel);
      check(await page.evaluate((l) => window.__vt.locateExternal(l), sel), 'the selected storage is not drawn in the lane');
      // Every finding is clickable: each selects a storage or shows itself.
      for (let i = 0; i < nItems; i++) {
        await page.click(item(i));
        await until(page, (k) => document.querySelector('#findings div.finding.sel') === document.querySelector('#findings div.finding[data-f="' + k + '"]'), i);
      }
      await shot(page, 'external_finding_shows_its_holder_chain');
    });
  },

  // The opt-in tape rule (tape_shape.py: a hand-written tape keeping every
  // activation until the end of the step): `viz --rules linger,pinned,tape`
  // lists the checker's tape findings and hatches their storages in violet
  // from the last use, with the step's peak marked; default rules do not.
  async tape_findings_in_the_timeline() {
    const snap = join(artifacts, 'tape.vtsnap');
    runTorch(join(pythonTests, 'tape_shape.py'), ['leak', snap]);
    const rules = ['--rules', 'linger,pinned,tape'];
    const rep = checkJson(snap, rules);
    const ntape = rep.findings.filter((f) => f.rule === 'tape').length;
    check(ntape > 0, 'the checker found no tape: ' + JSON.stringify(rep.findings.map((f) => f.rule)));
    const violet = [0xa0, 0x40, 0xd0];
    let plain;
    await withPage(viz(snap, join(artifacts, 'tape_default.html'), ['--check']), async (page) => {
      plain = await canvasStats(page, 'ext', violet);
      check(await page.$$eval('#findings .finding.tape', (f) => f.length) === 0, 'tape findings without --rules tape');
    });
    await withPage(viz(snap, join(artifacts, 'tape.html'), rules), async (page) => {
      const ntapeGroups = rep.groups.filter((g) => g.rule === 'tape').length;
      const heads = await page.$$eval('#findings > .finding.tape, #findings > details.tape', (f) => f.length);
      check(heads === ntapeGroups, 'tape entries: ' + heads + ', checker\'s tape causes: ' + ntapeGroups);
      await expandFindings(page);
      const items = await page.$$eval('#findings div.finding.tape', (f) => f.map((x) => x.textContent));
      check(items.length === ntape, 'tape findings listed: ' + items.length + ', checker: ' + ntape);
      check(items.every((t) => t.startsWith('tape: ') && t.includes("alive at the step's peak")), 'tape titles: ' + items[0]);
      const st = await canvasStats(page, 'ext', violet);
      check(st.match > plain.match + 100, 'no violet hatch in the lane: ' + JSON.stringify([st, plain]));
      check(await page.evaluate(() => !document.querySelector('#ext-panel .tape-legend').hidden), 'no tape legend');
      // The peak is marked: violet triangles on the lane's top edge.
      const peak = await page.evaluate(() => {
        const c = document.getElementById('ext'), d = c.getContext('2d').getImageData(0, 0, c.width, 40).data;
        let n = 0;
        for (let i = 0; i < d.length; i += 4) if (Math.abs(d[i] - 0x8e) < 8 && Math.abs(d[i + 1] - 0x24) < 8 && Math.abs(d[i + 2] - 0xaa) < 8) n++;
        return n;
      });
      check(peak > 10, 'no step peak marked: ' + peak);
      // A tape finding selects its storage; its band's tooltip and the
      // detail panel say what the rule found and what held it at the peak.
      await page.click('#findings .finding.tape');
      await until(page, () => document.getElementById('detail').textContent.includes('retained inside its step'));
      const detail = await page.textContent('#detail');
      check(/held by \(at the step's peak\):/.test(detail) && detail.includes('tensor \'a = torch.tanh(a @ w) (tape_shape.py:'),
        'no holder at the peak in the tape detail: ' + detail);
      const l = await page.evaluate(() => window.__vt.view.selected);
      const pos = await page.evaluate((k) => window.__vt.locateExternal(k), l);
      check(pos, 'the tape finding\'s storage is not drawn in the lane');
      const tipText = await hoverTip(page, pos.x, pos.y);
      check(tipText.includes('tape: ') && tipText.includes('on CPU'), 'tooltip of the tape storage: ' + tipText);
      await shot(page, 'tape_findings_in_the_timeline');
    });
  },

  // The first view of a run shaped like a real PyTorch one (gen_snapshot
  // run: weights, 3.6 s with no event, 30 short steps, a cache reserving
  // far more than is allocated, a 112-byte CPU storage, 28 leaks from one
  // cause, the snapshot 1 s after the last event): the steps run across
  // most of the width, the allocated bands reach the upper half, the CPU
  // lane is a thin strip, and the findings are one entry with its count,
  // as `vramtrace check` groups them.
};

await runTest(tests);
