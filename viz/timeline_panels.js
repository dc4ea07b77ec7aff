/*
 * viz/timeline_panels.js - the panels on the right: stacks and findings as
 * the text views tell them, the selected allocation or storage, the largest
 * allocations at a moment, what the cache did not serve, the findings list
 * grouped by cause, and selecting.
 *
 * Part of the timeline page's one script function: see timeline_data.js.
 */
  // ------------------------------------------------------------- panels
  /* A stack as the text views show it: where the program's own code is on
   * it, its lines first (innermost first) and the rest (the libraries'
   * Python frames, the native frames) under one line that opens; else every
   * frame, the plumbing the text views fold folded (isFolded). */
  function stackHTML(node) {
    if (!node) return '<div class="none">no stack recorded</div>';
    const frs = stackFrames(node);
    const list = (xs) => '<ol class="stack">' + xs.map((fr) => {
      const t = frameText(fr);
      return '<li>' + esc(t.fn) + (t.where ? ' <span class="loc">' + esc(whereDef(t)) + '</span>' : '') + '</li>';
    }).join('') + '</ol>';
    // the interpreter's own frames and torch's dispatch plumbing (in a
    // stack with Python frames) and a recorder's own, folded
    const python = frs.some(isPython);
    const fold = (xs) => xs.filter((fr) => !isFolded(fr, python));
    const own = frs.filter(isUser);
    const rest = own.length ? frs.filter((fr) => !isUser(fr)) : frs;
    const kept = fold(rest), folded = rest.length - kept.length;
    const note = folded ? '<div class="none">' + folded + ' interpreter and dispatch frames hidden</div>' : '';
    if (!own.length)
      return note + list(kept);
    return list(own) + '<details class="stack-rest"><summary>' + kept.length +
      ' library and native frames under them</summary>' + note + list(kept) + '</details>';
  }
  function streamName(i) { return meta.streams[i] === '0x0' ? 'default (0x0)' : meta.streams[i]; }

  /* A finding as `vramtrace check` tells it: what, why (a cycle: "held by
   * a reference cycle until gc ran"; a tape: its step and peak), and every
   * holder chain, in the checker's own text ("(cycle) Node.link → ..."). */
  const CHAIN_RULES = ['linger', 'pinned', 'cycle', 'tape'];
  function findingHTML(fi) {
    const f = findings[fi];
    let h = '<div class="t">' + esc(f.title || f.kind || 'finding') + '</div>';
    if (f.msg) h += '<div>' + esc(f.msg) + '</div>';
    if (f.why) h += '<div class="why">' + esc(f.why) + '</div>';
    if (f.lastUse != null) h += '<div>last use at ' + fmtTime(f.lastUse) + '</div>';
    if (f.peak != null) h += '<div>alive and unused at its step\'s peak, at ' + fmtTime(f.peak) + '</div>';
    else if (f.from != null) h += '<div>alive after its last use since ' + fmtTime(f.from) + '</div>';
    if (f.path && f.path.length) {
      h += '<div>held by' + (f.pathAt ? ' (' + esc(f.pathAt) + ')' : '') + ':</div><ol class="path">' +
        f.path.map((p) => '<li' + (p.startsWith('(cycle)') ? ' class="cycle"' : '') + '>' + esc(p) + '</li>').join('') + '</ol>';
    } else if (f.src === 'check' && CHAIN_RULES.includes(f.kind)) {
      h += '<div class="none">held by: no recorded reference (every tensor on it was dropped)</div>';
    }
    return h;
  }
  const findingBox = (fi) => '<div class="finding' + (findings[fi].kind === 'tape' ? ' tape' : '') + '">' + findingHTML(fi) + '</div>';
  /* A finding whose storage is not on the page (nothing drawn to select):
   * the finding alone. */
  function showFindingDetail(fi) {
    view.selected = -1;
    view.finding = fi;
    $('detail').innerHTML = '<h3>Checker finding</h3>' + findingBox(fi);
    showFindings();
    schedule();
  }

  function showDetail(l) {
    detail();
    const el = $('detail');
    if (l < 0) { el.innerHTML = 'Click a band in the timeline.'; return; }
    if (isExt(l)) { showExternalDetail(l); return; }
    const alive = lEnd[l] >= nE;
    const ta = lAlloc[l] < 0 ? null : evT[lAlloc[l]];
    const te = alive ? null : evT[lEnd[l]];
    const fl = [];
    if (lFlags[l] & FL_ALIVE) fl.push('alive at the snapshot');
    if (lFlags[l] & FL_BEFORE) fl.push('allocated before the recorded window');
    if (lFlags[l] & FL_PENDING) fl.push('free pending stream events');
    if (lFlags[l] & FL_FREE_LOST) fl.push('free never recorded');
    if (lFlags[l] & FL_FREE_UNSEEN) fl.push('freed where the kept events do not show it (a gap, or after they were copied): not alive');
    if (lFlags[l] & FL_AFTER) fl.push('allocated after the last kept event');
    const streams = [streamName(lStream[l])].concat((extraStreams.get(l) || []).map(streamName));
    const dev = meta.devices[lDev[l]];
    let h = '<dl>';
    h += '<dt>allocation</dt><dd>' + esc(lifetimeTitle(l)) + '</dd>';
    h += '<dt>size</dt><dd>' + fmtBytes(lSize[l]) + ' (' + lSize[l] + ' B' + (lReq[l] ? ', requested ' + lReq[l] + ' B' : '') + ')</dd>';
    h += '<dt>address</dt><dd>' + hex(lAddr[l]) + (dev ? ' on cuda:' + dev.ord : '') + '</dd>';
    h += '<dt>allocated</dt><dd>' + (ta == null ? 'before the window' : fmtTime(ta) + ' (event #' + lAlloc[l] + ')') + '</dd>';
    h += '<dt>released</dt><dd>' + (te != null ? fmtTime(te) + ' (event #' + lEnd[l] + ')'
      : lFlags[l] & FL_PENDING ? 'freed by the program; the block still waits for stream work at the end'
        : 'never (alive at the end)') + '</dd>';
    h += '<dt>lifetime</dt><dd>' + (ta == null ? '?' : fmtTime((te == null ? lastT : te) - ta)) + (te == null ? '+' : '') + '</dd>';
    h += '<dt>streams</dt><dd>' + esc(streams.join(', ')) + '</dd>';
    if (fl.length) h += '<dt>state</dt><dd>' + esc(fl.join('; ')) + '</dd>';
    h += '</dl>';
    if (lFinding[l] >= 0) {
      h += '<h3>Checker finding</h3>' + findingBox(lFinding[l]);
    }
    h += '<h3>Allocation stack</h3>' + stackHTML(lSite[l]);
    h += '<h3>Free stack</h3>' + (alive ? '<div class="none">not freed</div>' : stackHTML(lFree[l]));
    el.innerHTML = h;
  }

  /* A storage vramtrace did not allocate: its life as the checker sees it. */
  function showExternalDetail(l) {
    detail();
    const alive = lEnd[l] >= nE;
    const ta = lAlloc[l] < 0 ? null : evT[lAlloc[l]];
    const te = alive ? null : evT[lEnd[l]];
    const k = xRow[l];
    let h = '<dl>';
    h += '<dt>storage</dt><dd>' + esc(lName[l] ? 'tensor \'' + str(lName[l]) + '\'' : 'storage #' + l) + '</dd>';
    h += '<dt>size</dt><dd>' + fmtBytes(lSize[l]) + ' (' + lSize[l] + ' B)</dd>';
    h += '<dt>address</dt><dd>' + hex(lAddr[l]) + ' on ' + esc(extKind(l)) + ' (tracked; not allocated by vramtrace)</dd>';
    h += '<dt>allocated</dt><dd>' + (ta == null ? 'before the window' : fmtTime(ta) + ' (event #' + lAlloc[l] + ')') + '</dd>';
    h += '<dt>last use</dt><dd>' + (k >= 0 && xUse[k] >= 0 ? fmtTime(xUse[k]) : 'never used') +
      (k >= 0 ? ' (' + xNuse[k] + ' use' + (xNuse[k] === 1 ? '' : 's') + ', ' + xNt[k] + ' tensor' + (xNt[k] === 1 ? '' : 's') + ' bound)' : '') + '</dd>';
    h += '<dt>released</dt><dd>' + (te != null ? fmtTime(te) + ' (event #' + lEnd[l] + ')' : 'never (alive at the end)') + '</dd>';
    h += '<dt>lifetime</dt><dd>' + (ta == null ? '?' : fmtTime((te == null ? lastT : te) - ta)) + (te == null ? '+' : '') + '</dd>';
    h += '</dl>';
    if (lFinding[l] >= 0) {
      h += '<h3>Checker finding</h3>' + findingBox(lFinding[l]);
    }
    h += '<h3>Allocation stack</h3>' + stackHTML(lSite[l]);
    h += '<h3>Free stack</h3>' + (alive ? '<div class="none">not freed</div>' : stackHTML(lFree[l]));
    $('detail').innerHTML = h;
  }

  function showTop() {
    detail();
    const tbl = $('top');
    const m = view.moment > -2 ? view.moment : peakState;
    $('moment-label').textContent = (m < 0 ? 'the start' : fmtTime(evT[m]) + ' (event #' + m + ')') +
      (view.moment > -2 ? '' : ', the peak');
    sweep.reset();
    sweep.to(m);
    const alive = sweep.alive();
    alive.sort((a, b) => lSize[b] - lSize[a] || a - b);
    let sum = 0;
    for (const l of alive) sum += lSize[l];
    let h = '<tr><th class="num">size</th><th>name</th><th>call site</th><th class="num">age</th></tr>';
    for (const l of alive.slice(0, 40)) {
      const age = lAlloc[l] < 0 ? '?' : fmtTime(timeAt(m) - evT[lAlloc[l]]);
      h += '<tr class="row' + (l === view.selected ? ' sel' : '') + '" data-l="' + l + '"><td class="num">' + fmtBytes(lSize[l]) +
        '</td><td class="name" title="' + esc(allocName(l)) + '">' +
        (lFinding[l] >= 0 ? '<b style="color:#d32f2f" title="checker finding">!</b> ' : '') + esc(allocName(l)) +
        '</td><td class="site" title="' + esc(siteLabel(lSite[l])) + '">' + esc(siteLabel(lSite[l])) +
        '</td><td class="num">' + age + '</td></tr>';
    }
    h += '<tr><td class="num"><b>' + fmtBytes(sum) + '</b></td><td colspan="3">' + alive.length.toLocaleString() + ' allocation' + (alive.length === 1 ? '' : 's') + ' alive</td></tr>';
    tbl.innerHTML = h;
  }

  /* Memory the program holds that the cache did not serve (managed, pinned
   * host, pitched, arrays, explicit pools, VMM): per kind, then what is
   * alive at the snapshot, largest first. Not in the curves above. */
  function showUncached() {
    const u = meta.uncached || [];
    $('nuncached').textContent = '(' + u.length + ')';
    const tbl = $('uncached');
    if (!u.length) { tbl.innerHTML = '<tr><td class="none">none</td></tr>'; return; }
    const kinds = new Map();
    for (const [kind, size, , alive] of u) {
      const k = kinds.get(kind) || { n: 0, alive: 0, nAlive: 0 };
      k.n++;
      if (alive) { k.alive += size; k.nAlive++; }
      kinds.set(kind, k);
    }
    let h = '<tr><th>kind</th><th class="num">allocations</th><th class="num">alive</th></tr>';
    for (const [kind, k] of kinds) {
      h += '<tr class="ukind"><td>' + esc(kind) + '</td><td class="num">' + k.n.toLocaleString() +
        '</td><td class="num">' + fmtBytes(k.alive) + ' in ' + k.nAlive.toLocaleString() + '</td></tr>';
    }
    const alive = u.filter((x) => x[3]).sort((a, b) => b[1] - a[1]);
    h += '<tr><th class="num">size</th><th>kind</th><th>call site (alive at the snapshot)</th></tr>';
    for (const [kind, size, node] of alive.slice(0, 40)) {
      h += '<tr class="ualive"><td class="num">' + fmtBytes(size) + '</td><td>' + esc(kind) +
        '</td><td class="site" title="' + esc(siteLabel(node)) + '">' + esc(siteLabel(node)) + '</td></tr>';
    }
    tbl.innerHTML = h;
  }

  /* Findings by cause, as `vramtrace check` groups them (rule, owner name
   * and first holder path: one bug leaks one storage per step, each its
   * own finding): the checker's group of each (f.g), largest bytes first,
   * then the snapshot's recorded findings, one group per title. */
  const findingGroups = (() => {
    const byKey = new Map();
    findings.forEach((f, i) => {
      const key = f.g != null ? 'g' + f.g : 'r' + (f.kind || '') + '\u001f' + (f.title || '');
      let grp = byKey.get(key);
      if (!grp) byKey.set(key, (grp = { key, order: f.g != null ? f.g : Infinity, members: [], bytes: 0, held: 0 }));
      grp.members.push(i);
      const bytes = f.bytes != null ? f.bytes : (f.l >= 0 && f.l < nL ? lSize[f.l] : 0);
      grp.bytes += bytes;
      grp.held += f.held != null ? f.held : bytes;   // check's: its blocks where larger
    });
    return Array.from(byKey.values()).sort((a, b) => a.order - b.order || a.members[0] - b.members[0]);
  })();
  const openGroups = new Set();   // groups the user expanded

  /* ", in X of blocks" where a cause's blocks hold a quarter more than its
   * bytes (small tensors each take a block of 512 bytes at least), as
   * `vramtrace check` says it. */
  function heldBlocks(g) {
    return g.held - g.bytes > g.bytes / 4 ? ', in ' + fmtBytes(g.held) + ' of blocks' : '';
  }

  function findingLine(f, i) {
    const sel = (f.l >= 0 && f.l === view.selected) || (f.l < 0 && view.finding === i);
    return '<div class="finding' + (f.kind === 'tape' ? ' tape' : '') + (sel ? ' sel' : '') + '" data-f="' + i + '">' +
      '<div class="t">' + esc(clip(f.title || f.kind, 200)) + '</div>' +
      (f.l >= 0 && f.l < nL ? '<div>' + esc(clip(lifetimeTitle(f.l), 120)) + ', ' + fmtBytes(lSize[f.l]) +
        (isExt(f.l) ? ' on ' + esc(extKind(f.l)) : '') + ' &middot; ' + esc(clip(siteLabel(lSite[f.l]), 160)) + '</div>' : '') +
      '</div>';
  }
  function showFindings() {
    const nG = findingGroups.length;
    $('nfindings').textContent = '(' + findings.length + (nG < findings.length ? ' from ' + nG + ' cause' + (nG === 1 ? '' : 's') : '') + ')';
    const el = $('findings');
    // what the check left out as minor, in one line (as `vramtrace check` says it)
    const mi = meta.minor;
    const minor = mi ? '<div class="none minor">' + mi.n.toLocaleString() + ' minor finding' + (mi.n === 1 ? '' : 's') + ' (' +
      fmtBytes(mi.bytes) + heldBlocks({ bytes: mi.bytes, held: mi.held }) + ') under the floor of ' + fmtBytes(mi.floor) +
      ': not shown (<code>vramtrace check --min-bytes 0</code> lists them)</div>' : '';
    if (!findings.length) { el.innerHTML = '<div class="none">none' + (meta.checked ? '' : ' (run with --check to look for them)') + '</div>' + minor; return; }
    el.innerHTML = findingGroups.map((g) => {
      if (g.members.length === 1) return findingLine(findings[g.members[0]], g.members[0]);
      const i = g.members[0], f = findings[i];
      const n = g.members.length;
      const held = f.path && f.path.length ? '<div class="path1">the first held by: ' + esc(clip(f.path[0], 200)) + '</div>' : '';
      return '<details class="fgroup' + (f.kind === 'tape' ? ' tape' : '') + '" data-g="' + esc(g.key) + '"' + (openGroups.has(g.key) ? ' open' : '') + '>' +
        '<summary class="finding' + (f.kind === 'tape' ? ' tape' : '') + '" data-f="' + i + '"><span class="count">' + n + ' &times;</span> ' +
        '<span class="t">' + esc(clip(f.title || f.kind, 200)) + '</span>' +
        '<div>' + n + ' findings from one cause, ' + fmtBytes(g.bytes) + ' in all' + heldBlocks(g) + ' (' + fmtBytes(g.bytes / n) + ' each on average); open to list them</div>' +
        held + '</summary>' +
        g.members.map((m) => findingLine(findings[m], m)).join('') + '</details>';
    }).join('') + minor;
  }

  function select(l, moment) {
    view.selected = l;
    view.finding = -1;
    if (moment !== undefined) view.moment = moment;
    showDetail(l);
    showTop();
    showFindings();
    schedule();
  }

