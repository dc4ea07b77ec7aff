/*
 * viz/timeline_interaction.js - the pointer and the controls: tooltips of
 * bands and summary bands, zoom and pan of every plot (x, and y on the
 * timeline), the first view, hover and click on the timeline, the external
 * lane and the icicle, the toolbar.
 *
 * Part of the timeline page's one script function: see timeline_data.js.
 */
  // ------------------------------------------------------------- tooltip
  function showTip(ev, html) {
    if (!html) { tip.hidden = true; return; }
    tip.innerHTML = html;
    tip.hidden = false;
    const pad = 14;
    let x = ev.clientX + pad, y = ev.clientY + pad;
    const r = tip.getBoundingClientRect();
    if (x + r.width > innerWidth) x = ev.clientX - r.width - pad;
    if (y + r.height > innerHeight) y = ev.clientY - r.height - pad;
    tip.style.left = x + 'px';
    tip.style.top = y + 'px';
  }
  /* What plot `p` (its last draw on canvas `cv`) drew under the mouse:
   * its id buffer there, 0 outside the plot or before a draw. */
  function idOn(p, cv, ev) {
    if (!p) return 0;
    const r = cv.getBoundingClientRect();
    const x = Math.floor((ev.clientX - r.left) * dpr) - p.L;
    const y = Math.floor((ev.clientY - r.top) * dpr) - p.T;
    if (x < 0 || y < 0 || x >= p.PW || y >= p.PH) return 0;
    return p.ids[y * p.PW + x];
  }
  /* What the timeline drew under the mouse: lifetime + 1 (> 0), a summary
   * record -(r + 1) (< 0), or 0. */
  function idAtEvent(ev) { return idOn(plot, tl, ev); }
  /* A summary band: what it stands for, at that column. */
  function summaryFacts(r) {
    const q = plot.sum;
    return { site: q.site[r], n: q.n[r], bytes: q.bytes[r], linger: q.linger[r], s: q.state[r] };
  }
  function tipForSummary(r) {
    const f = summaryFacts(r);
    let h = '<b>' + f.n.toLocaleString() + ' allocation' + (f.n === 1 ? '' : 's') + '</b> from ' + esc(clip(siteLabel(f.site), 160)) +
      ', <b>' + esc(fmtBytes(f.bytes)) + '</b> alive here';
    h += '\naggregate: each is thinner than a pixel or lives less than a pixel at this zoom; zoom in (wheel, shift+wheel) to see them one by one';
    h += '\nat ' + (f.s < 0 ? 'the start' : fmtTime(evT[f.s]));
    if (f.linger) h += '\n<span class="warn">' + f.linger + ' of them alive after their last use (hatched)</span>';
    return h;
  }
  function showAggregate(r) {
    const f = summaryFacts(r);
    view.selected = -1;
    let h = '<dl>';
    h += '<dt>aggregate</dt><dd>' + f.n.toLocaleString() + ' allocation' + (f.n === 1 ? '' : 's') + ' from one call site</dd>';
    h += '<dt>alive</dt><dd>' + fmtBytes(f.bytes) + ' (' + f.bytes + ' B) at ' + (f.s < 0 ? 'the start' : fmtTime(evT[f.s])) + '</dd>';
    if (f.linger) h += '<dt>findings</dt><dd>' + f.linger + ' alive after their last use</dd>';
    h += '</dl><div class="none">Each is too small or too short-lived to draw at this zoom: zoom in to pick one.</div>';
    h += '<h3>Allocation stack</h3>' + stackHTML(f.site);
    $('detail').innerHTML = h;
  }
  function columnState(ev, p, canvas) {
    if (!p) return -2;
    const r = canvas.getBoundingClientRect();
    const x = Math.floor((ev.clientX - r.left) * dpr) - p.L;
    if (x < 0 || x >= p.PW) return -2;
    return p.st[x];
  }
  function tipFor(l, s) {
    detail();
    let h = '<b>' + esc(fmtBytes(lSize[l])) + '</b> ' + esc(clip(lifetimeTitle(l), 160));
    h += '\n' + esc(clip(siteLabel(lSite[l]), 160));
    const ta = lAlloc[l] < 0 ? null : evT[lAlloc[l]];
    h += '\nallocated ' + (ta == null ? 'before the window' : 'at ' + fmtTime(ta)) + ', ' +
      (lEnd[l] >= nE ? 'never freed' : 'freed at ' + fmtTime(evT[lEnd[l]]));
    if (isExt(l)) {
      const k = xRow[l];
      h += '\non ' + esc(extKind(l)) + ', not allocated by vramtrace; last use ' + (xUse[k] >= 0 ? 'at ' + fmtTime(xUse[k]) : ': never');
    }
    if (lFinding[l] >= 0) {
      const f = findings[lFinding[l]];
      h += '\n<span class="warn">' + esc(clip(f.title || f.kind, 200)) + (lLinger[l] <= timeAt(s) ? ' (past its last use here)' : '') + '</span>';
    }
    return h;
  }

  // ------------------------------------------------------------ interaction
  let pending = false;
  function schedule() {
    if (pending) return;
    pending = true;
    requestAnimationFrame(() => { pending = false; drawTimeline(); });
  }
  function clampView() {
    const dm = domainMax();
    const minSpan = view.mode === 'time' ? Math.min(dm, 200) : Math.min(dm, 8);
    let span = Math.max(minSpan, Math.min(dm * 1.02, view.v1 - view.v0));
    let v0 = view.v0;
    if (v0 < -dm * 0.01) v0 = -dm * 0.01;
    if (v0 + span > dm * 1.01) v0 = dm * 1.01 - span;
    view.v0 = v0; view.v1 = v0 + span;
  }
  /* The first view: the run, not the wait before it nor the time after it.
   * Time: from the first event to the last (not to the snapshot, which a
   * program writes at exit, maybe seconds later). When the first mark (a
   * step) comes after a long quiet start, a quarter of the span or more (the
   * import of a framework, its first kernels loading between the weights and
   * the first step), the view starts a little before that mark; without
   * marks, the same for one quiet gap that takes over half the span after a
   * few early events. What the view leaves out on the left is said on the
   * plot, and "show all" brings it back. By event index: the same events. */
  function runRange() {
    // A handful of events: the whole recording, up to the snapshot, shows
    // what is alive at its end better than a cut would.
    if (nE < 16) return [0, domainMax()];
    const tFirst = evT[0], tLast = evT[nE - 1];
    let first = 0;   // the first event of the run
    if (meta.marks.length) {
      const m = Math.max(0, Math.min(nE - 1, meta.marks[0][0]));
      if (evT[m] - tFirst > 0.25 * (tLast - tFirst) && tLast > evT[m]) first = m;
    } else {
      let gap = 0, at = 0;
      for (let e = 1; e < nE; e++) if (evT[e] - evT[e - 1] > gap) { gap = evT[e] - evT[e - 1]; at = e; }
      if (gap > 0.5 * (tLast - tFirst) && at <= Math.max(8, 0.05 * nE) && tLast > evT[at]) first = at;
    }
    if (view.mode === 'event') {
      const lead = first ? Math.max(1, Math.round(0.04 * (nE - first))) : 0;
      return [Math.max(0, first - lead) - 0.5, nE + 0.5];
    }
    const span = Math.max(tLast - evT[first], 1);
    // A little lead-in: what the run starts from (weights, the first step's setup).
    const t0 = first ? Math.max(tFirst, evT[first] - 0.04 * span) : tFirst;
    return [t0 - 0.01 * span, tLast + 0.02 * span];
  }
  function resetView() {
    [view.v0, view.v1] = runRange();
    clampView();
    setYMode('fit');
    schedule();
  }
  function showAll() {
    view.v0 = 0; view.v1 = domainMax();
    clampView();
    schedule();
  }
  /* The y range stays inside [0, the tallest stack of the whole run] and
   * never narrower than a few KiB. */
  function clampY() {
    const top = Math.max(1, initAlloc, initResv, peakAlloc, peakResv) * 1.05;
    let span = Math.max(4096, Math.min(top, view.y1 - view.y0));
    let y0 = Math.max(0, view.y0);
    if (y0 + span > top) y0 = Math.max(0, top - span);
    view.y0 = y0; view.y1 = y0 + span;
  }
  function setYMode(mode) {
    view.yMode = mode;
    $('ymode').value = mode;
  }

  /* Wheel zooms x around the cursor; with shift (on the timeline, `yZoom`)
   * it zooms bytes around the cursor instead and locks the y range. Drag
   * pans x, and y too while y is locked. */
  function attachPlotInteraction(canvas, getPlot, yZoom) {
    let drag = null;
    canvas.addEventListener('wheel', (ev) => {
      ev.preventDefault();
      const p = getPlot();
      if (!p) return;
      const r = canvas.getBoundingClientRect();
      if (yZoom && ev.shiftKey) {
        // Browsers turn shift+wheel into a horizontal scroll: take either delta.
        const fy = Math.min(1, Math.max(0, ((ev.clientY - r.top) * dpr - p.T) / p.PH));
        const anchor = view.y0 + (1 - fy) * (view.y1 - view.y0);
        const span = (view.y1 - view.y0) * Math.exp((ev.deltaY || ev.deltaX) * 0.0015);
        view.y0 = anchor - (1 - fy) * span;
        view.y1 = view.y0 + span;
        setYMode('lock');
        clampY();
        schedule();
        return;
      }
      const fx = Math.min(1, Math.max(0, ((ev.clientX - r.left) * dpr - p.L) / p.PW));
      const anchor = view.v0 + fx * (view.v1 - view.v0);
      const k = Math.exp((ev.deltaY || ev.deltaX) * 0.0015);
      const span = (view.v1 - view.v0) * k;
      view.v0 = anchor - fx * span;
      view.v1 = view.v0 + span;
      clampView();
      schedule();
    }, { passive: false });
    canvas.addEventListener('mousedown', (ev) => {
      drag = { x: ev.clientX, y: ev.clientY, v0: view.v0, v1: view.v1, y0: view.y0, y1: view.y1, moved: false };
    });
    window.addEventListener('mousemove', (ev) => {
      if (!drag) return;
      const p = getPlot();
      const dx = ev.clientX - drag.x, dy = ev.clientY - drag.y;
      if (Math.abs(dx) > 3 || Math.abs(dy) > 3) drag.moved = true;
      if (!drag.moved || !p) return;
      const shift = (-dx * dpr / p.PW) * (drag.v1 - drag.v0);
      view.v0 = drag.v0 + shift; view.v1 = drag.v1 + shift;
      clampView();
      if (yZoom && view.yMode === 'lock') {
        const ysh = (dy * dpr / p.PH) * (drag.y1 - drag.y0);
        view.y0 = drag.y0 + ysh; view.y1 = drag.y1 + ysh;
        clampY();
      }
      schedule();
    });
    window.addEventListener('mouseup', () => { setTimeout(() => { drag = null; }, 0); });
    return () => drag && drag.moved;
  }

  const tlDragging = attachPlotInteraction(tl, () => plot, true);
  const segDragging = attachPlotInteraction(seg, () => segPlot);

  let tipEv = null;   // the last mouse position over the timeline, to refresh its tooltip after a redraw
  function timelineTip(ev) {
    const id = idAtEvent(ev);
    if (id === 0) { showTip(ev, null); return; }
    showTip(ev, id > 0 ? tipFor(id - 1, columnState(ev, plot, tl)) : tipForSummary(-id - 1));
  }
  tl.addEventListener('mousemove', (ev) => { tipEv = { clientX: ev.clientX, clientY: ev.clientY }; timelineTip(ev); });
  tl.addEventListener('mouseleave', () => { tipEv = null; tip.hidden = true; });
  tl.addEventListener('click', (ev) => {
    if (tlDragging()) return;
    const s = columnState(ev, plot, tl);
    const id = idAtEvent(ev);
    if (id < 0) {
      const f = summaryFacts(-id - 1);
      view.moment = f.s;
      showAggregate(-id - 1);
      showTop();
      showFindings();
      schedule();
      return;
    }
    select(id - 1, s === -2 ? view.moment : s);
  });
  // The lane of external storages: hover and click as on the timeline.
  const extDragging = attachPlotInteraction(ext, () => extPlot);
  let extTipEv = null;
  function extIdAt(ev) { return idOn(extPlot, ext, ev); }
  function extTip(ev) {
    const id = extIdAt(ev);
    showTip(ev, id > 0 ? tipFor(id - 1, columnState(ev, extPlot, ext)) : null);
  }
  ext.addEventListener('mousemove', (ev) => { extTipEv = { clientX: ev.clientX, clientY: ev.clientY }; extTip(ev); });
  ext.addEventListener('mouseleave', () => { extTipEv = null; tip.hidden = true; });
  ext.addEventListener('click', (ev) => {
    if (extDragging()) return;
    const id = extIdAt(ev);
    if (id <= 0) return;
    const s = columnState(ev, extPlot, ext);
    select(id - 1, s === -2 ? view.moment : s);
  });
  seg.addEventListener('mousemove', (ev) => {
    const s = columnState(ev, segPlot, seg);
    if (s === -2) { showTip(ev, null); return; }
    const a = allocAt(s), r = resvAt(s);
    showTip(ev, '<b>' + (s < 0 ? 'start' : fmtTime(evT[s])) + '</b>\nreserved ' + fmtBytes(r) +
      (replayCurve && s <= replayEnd ? '\nreplayed reserved ' + fmtBytes(replayAt(s)) : '') +
      (poolAt(s) > 0 ? '\nof it, CUDA graphs\' pools ' + fmtBytes(poolAt(s)) + ' (kept for their replays)' : '') +
      '\nallocated ' + fmtBytes(a) +
      '\nunused in cache ' + fmtBytes(Math.max(0, r - a)) + (r > 0 ? ' (' + (100 * Math.max(0, r - a) / r).toFixed(1) + '%)' : ''));
  });
  seg.addEventListener('mouseleave', () => { tip.hidden = true; });
  seg.addEventListener('click', (ev) => {
    if (segDragging()) return;
    const s = columnState(ev, segPlot, seg);
    if (s !== -2) select(view.selected, s);
  });
  function flameAt(ev) {
    const r = flame.getBoundingClientRect();
    const x = (ev.clientX - r.left) * dpr, y = (ev.clientY - r.top) * dpr;
    return flameRects.find((b) => x >= b.x && x < b.x + b.w && y >= b.y && y < b.y + b.h);
  }
  flame.addEventListener('mousemove', (ev) => {
    const b = flameAt(ev);
    if (!b) { showTip(ev, null); return; }
    let h;
    if (b.k === 0) h = '<b>' + fmtBytes(b.bytes) + '</b> live at the peak';
    else {
      const t = frameText(flameTree(view.flameAll).frame[b.k]);
      h = '<b>' + esc(fmtBytes(b.bytes)) + '</b> ' + esc(t.fn) + (t.where ? '\n' + esc(whereDef(t)) : '') +
        (b.self ? '\nallocated right here: ' + fmtBytes(b.self) : '');
    }
    showTip(ev, h + '\n(click: zoom in/out)');
  });
  flame.addEventListener('mouseleave', () => { tip.hidden = true; });
  flame.addEventListener('click', (ev) => {
    const b = flameAt(ev);
    if (!b) return;
    view.flameRoot = b.k === view.flameRoot && b.k !== 0 ? flameTree(view.flameAll).parent[b.k] : b.k;
    drawFlame();
  });
  $('flame-all').addEventListener('change', () => {
    // Tree nodes differ between the two trees: start again from the top.
    view.flameAll = $('flame-all').checked;
    view.flameRoot = 0;
    drawFlame();
  });
  $('top').addEventListener('click', (ev) => {
    const tr = ev.target.closest('tr[data-l]');
    if (tr) select(+tr.dataset.l);
  });
  $('findings').addEventListener('click', (ev) => {
    const d = ev.target.closest('[data-f]');
    if (!d) return;
    // A group's head: opens or closes it (the list is drawn again below, so
    // the state lives in openGroups) and selects its first finding.
    const g = d.tagName === 'SUMMARY' ? d.parentNode.dataset.g : null;
    if (g != null) {
      ev.preventDefault();
      if (openGroups.has(g)) openGroups.delete(g); else openGroups.add(g);
      showFindings();
    }
    const f = findings[+d.dataset.f];
    const l = f.l >= 0 ? f.l : (f.ls && f.ls.length ? f.ls[0][0] : -1);
    if (l < 0 || l >= nL) { showFindingDetail(+d.dataset.f); return; }
    const end = lEnd[l] >= nE ? nE - 1 : lEnd[l] - 1;
    select(l, Math.max(-1, end));
  });
  $('xmode').addEventListener('click', () => {
    // Keep the same stretch of history in view across the switch.
    if (view.mode === 'time') {
      const a = lowerBound(evT, nE, view.v0), b = lowerBound(evT, nE, view.v1);
      view.mode = 'event'; view.v0 = a; view.v1 = Math.max(b, a + 8);
    } else {
      const a = evT[Math.max(0, Math.min(nE - 1, Math.floor(view.v0)))] || 0;
      const b = evT[Math.max(0, Math.min(nE - 1, Math.ceil(view.v1)))] || lastT;
      view.mode = 'time'; view.v0 = a; view.v1 = Math.max(b, a + 200);
    }
    $('xmode').textContent = 'x: ' + (view.mode === 'time' ? 'time' : 'event index');
    clampView();
    schedule();
  });
  $('reset').addEventListener('click', resetView);
  $('all').addEventListener('click', showAll);
  $('ymode').addEventListener('change', () => {
    // 'lock' keeps the range of the last draw; the others fit again.
    view.yMode = $('ymode').value;
    schedule();
  });
  const devSel = $('device');
  devSel.innerHTML = '<option value="-1">all</option>' + meta.devices.map((d, i) =>
    '<option value="' + i + '">cuda:' + d.ord + (d.name ? ' ' + esc(str(d.name)) : '') + '</option>').join('');
  if (meta.devices.length === 1) { devSel.value = '0'; view.device = 0; }
  devSel.addEventListener('change', () => {
    view.device = +devSel.value;
    applyFilter();
    view.flameRoot = 0;
    drawFlame();
    select(view.selected);
  });
  window.addEventListener('resize', () => { dpr = window.devicePixelRatio || 1; schedule(); drawFlame(); });

