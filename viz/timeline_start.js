/*
 * viz/timeline_start.js - the first paint and what follows it: the header's
 * figures, the lanes shown, the panels filled; then the read-only facts the
 * tests and benchmarks read (window.__vt). Closes the page's function.
 *
 * Part of the timeline page's one script function: see timeline_data.js.
 */
  // ------------------------------------------------------------------ start
  function header() {
    const i = meta.info;
    $('cmd').textContent = i.command || '';
    $('cmd').title = i.command || '';
    let peakA = 0, peakR = 0;
    for (let e = 0; e < nE; e++) { peakA = Math.max(peakA, allocCurve[e]); peakR = Math.max(peakR, resvCurve[e]); }
    peakA = Math.max(peakA, initAlloc); peakR = Math.max(peakR, initResv);
    let truePeak = null;
    for (const d of meta.devices) if (d.truePeak != null) truePeak = Math.max(truePeak || 0, d.truePeak);
    const parts = [
      '<b>' + fmtBytes(peakA) + '</b> peak allocated' + (truePeak != null || i.eventsOverwritten || i.gaps ? ' in the kept events' : ''),
      '<b>' + fmtBytes(peakR) + '</b> peak reserved',
      '<b>' + (nL - nX).toLocaleString() + '</b> allocations',
      '<b>' + nE.toLocaleString() + '</b> events',
    ];
    // Device memory PyTorch's allocator (the one framework observed) did not
    // hand out: libraries' own (cuBLAS's handles and workspaces) and the
    // program's own cudaMalloc. Said with the most of it alive at once, as a
    // user adding it to memory_allocated() would want it; their blocks are in
    // the reserved line only.
    let nOutside = 0, outsideNow = 0, outsidePeak = 0;
    const outsideDelta = new Float64Array(nE + 1);
    for (let l = 0; l < nL; l++) {
      if (!(lFlags[l] & FL_OUTSIDE_POOL)) continue;
      nOutside++;
      outsideDelta[Math.max(0, lAlloc[l])] += lSize[l];
      outsideDelta[lEnd[l]] -= lSize[l];
    }
    for (let e = 0; e < nE; e++) outsidePeak = Math.max(outsidePeak, outsideNow += outsideDelta[e]);
    if (nOutside) {
      parts.push('<b>' + nOutside.toLocaleString() + '</b> of them outside PyTorch\'s allocator, ' +
        (nOutside === 1 ? '' : 'at most ') + '<b>' + fmtBytes(outsidePeak) + '</b>' + (nOutside === 1 ? '' : ' at once') +
        ' (libraries\' own, as cuBLAS\'s workspaces: in reserved, not drawn)');
    }
    if (truePeak != null) parts.push('<b>' + fmtBytes(truePeak) + '</b> true peak allocated (allocator, whole run)');
    // What vramtrace passed through (pinned host, managed, ...): another
    // kind of memory than the device's, named by its kinds.
    let uncachedAlive = 0;
    const uncachedKinds = [];
    for (const x of meta.uncached || []) {
      if (!x[3]) continue;
      uncachedAlive += x[1];
      if (!uncachedKinds.includes(x[0])) uncachedKinds.push(x[0]);
    }
    if (uncachedAlive) {
      parts.push('<b>' + fmtBytes(uncachedAlive) + '</b> of ' + esc(uncachedKinds.join(', ')) +
        ' memory alive, not served by the cache');
    }
    if (nX) parts.push('<b>' + nX.toLocaleString() + '</b> tracked ' + esc(extKinds.join(', ') || 'external') +
      ' storage' + (nX === 1 ? '' : 's') + ', peak <b>' + fmtBytes(peakExt) + '</b>');
    if (i.gaps) parts.push('<span style="color:#d32f2f">' + i.gaps.toLocaleString() + ' gaps in the events</span>');
    if (i.eventsOverwritten) parts.push('<span style="color:#d32f2f">' + i.eventsOverwritten.toLocaleString() + ' events lost</span>');
    if (i.host) parts.push(esc(i.host) + (i.pid ? ':' + i.pid : ''));
    $('stats').innerHTML = parts.join(' &middot; ');
  }

  applyFilter();
  if (nX) {
    // The lane of external storages: named for what they are on; first
    // when the run allocated nothing on a device.
    const panel = $('ext-panel');
    panel.hidden = false;
    $('ext-label').textContent = '(' + nX.toLocaleString() + ' on ' + (extKinds.join(', ') || 'external') +
      ', not allocated by vramtrace; peak ' + fmtBytes(peakExt) + ')';
    if (nL === nX) panel.parentNode.insertBefore(panel, panel.parentNode.firstElementChild);
    else {
      // Sized by what it holds next to the device's bytes: 112 bytes of CPU
      // tensors get a thin strip, a lane as large as the device a tall one.
      const share = peakExt / Math.max(1, peakExt + peakAlloc);
      $('ext-wrap').style.height = Math.round(Math.min(300, 72 + 260 * Math.sqrt(share))) + 'px';
    }
  } else {
    ext.width = 0; ext.height = 0;   // the hidden lane keeps no backing store
  }
  if (tapePeaks.length) for (const el of document.querySelectorAll('.tape-legend')) el.hidden = false;
  if (pauses.length) for (const el of document.querySelectorAll('.pause-legend')) el.hidden = false;
  if (poolCurve) for (const el of document.querySelectorAll('.pool-legend')) el.hidden = false;

  dpr = window.devicePixelRatio || 1;
  resetView();
  drawTimeline();   // first paint right away, not a frame later
  // Shown before the detail columns and the panels cost their time; they
  // are all there together after that.
  await new Promise((r) => requestAnimationFrame(() => setTimeout(r, 0)));
  header();
  detail();
  showFindings();
  showTop();
  showUncached();
  showOom();
  drawFlame();

  /* Client coordinates of a pixel that canvas `cv`, drawn as `p` (its plot:
   * ids of the lifetime drawn at each pixel), shows of lifetime l: the middle
   * of its tallest column run; null if it is not drawn. */
  function locateOn(p, cv, l) {
    if (!p) return null;
    let best = null;
    for (let x = 0; x < p.PW; x++) {
      let run = 0, y0 = -1;
      for (let y = 0; y < p.PH; y++) {
        if (p.ids[y * p.PW + x] === l + 1) { if (run === 0) y0 = y; run++; }
      }
      if (run && (!best || run > best.run)) best = { run, x, y: y0 + run / 2 };
    }
    if (!best) return null;
    const r = cv.getBoundingClientRect();
    return { x: r.left + (p.L + best.x + 0.5) / dpr, y: r.top + (p.T + best.y) / dpr };
  }

  // For tests and benchmarks: read-only facts about the page.
  window.__vt = {
    get firstPaintMs() { return firstPaint; },
    get drawCount() { return drawCount; },
    get lastDrawMs() { return lastDrawMs; },
    nLifetimes: nL - nX,   // device allocations (external storages: nExternal)
    /* External storages (the lane): how many, their names, whether l is one. */
    nExternal: nX,
    externalNames() {
      detail();
      const out = [];
      for (let l = 0; l < nL; l++) if (isExt(l)) out.push(str(lName[l]));
      return out;
    },
    isExternal(l) { return isExt(l); },
    /* Client coordinates of a pixel the external lane drew for lifetime l
     * (the middle of its tallest column run), or null. */
    locateExternal(l) { return locateOn(extPlot, ext, l); },
    /* The lane's drawn bands: distinct lifetimes in its id buffer. */
    externalDrawn() {
      if (!extPlot) return 0;
      const seen = new Set();
      for (const id of extPlot.ids) if (id > 0) seen.add(id);
      return seen.size;
    },
    nEvents: nE,
    /* The marks' labels as drawn (a run that marked none: the steps its
     * backward passes tell, `check`'s). */
    markLabels() { return meta.marks.map((_, i) => markLabel(i)); },
    /* The tool's pauses drawn in the main timeline's last draw: [x0, x1]
     * in the canvas's CSS px (none on the event axis). */
    pauseBands() { return pauseBands.map((b) => b.slice()); },
    /* The OOM: its axis position and the panel's text (null without one),
     * and the client x of its marker in the last draw (null: not drawn). */
    oom: oom ? { ax: oom.ax, size: oom.x.request.size } : null,
    oomPanelText() { return oom ? $('oom').textContent : null; },
    oomMarkerX() {
      if (oomX == null) return null;
      return tl.getBoundingClientRect().left + oomX / dpr;
    },
    /* The rows of the "Not served by the cache" panel, as text. */
    uncachedRows() { return Array.from(document.querySelectorAll('#uncached tr')).map((r) => r.textContent); },
    findLifetime(name) {
      detail();
      for (let l = 0; l < nL; l++) if (lName[l] && str(lName[l]) === name) return l;
      return -1;
    },
    /* Client coordinates of a pixel the timeline drew for lifetime l (the
     * middle of its tallest column run), or null if it is not visible. */
    locate(l) { return locateOn(plot, tl, l); },
    /* The decoded facts of lifetime l, and the one drawn at a canvas pixel. */
    lifetime(l) {
      detail();
      return { size: lSize[l], alloc: lAlloc[l], end: lEnd[l], site: lSite[l], name: str(lName[l]),
        addr: lAddr[l], flags: lFlags[l], finding: lFinding[l] };
    },
    idAt(x, y) { return plot ? plot.ids[y * plot.PW + x] - 1 : -1; },
    /* The icicle's boxes as drawn: function, bytes, client coordinates of
     * the box's middle. */
    flameBoxes() {
      const T = flameTree(view.flameAll), r = flame.getBoundingClientRect();
      return flameRects.filter((b) => b.k > 0).map((b) => ({ fn: frameText(T.frame[b.k]).fn, bytes: b.bytes,
        x: r.left + (b.x + b.w / 2) / dpr, y: r.top + (b.y + b.h / 2) / dpr }));
    },
    /* Client coordinates of the middle of the tallest summary band drawn
     * for a call site whose label contains `text`, or null. */
    locateSummary(text) {
      if (!plot) return null;
      const q = plot.sum;
      let best = -1;
      for (let r = 0; r < q.site.length; r++) {
        if (!siteLabel(q.site[r]).includes(text)) continue;
        if (best < 0 || q.bot[r] - q.top[r] > q.bot[best] - q.top[best]) best = r;
      }
      if (best < 0) return null;
      const rr = tl.getBoundingClientRect();
      return { x: rr.left + (plot.L + q.col[best] + 0.5) / dpr,
        y: rr.top + (plot.T + (q.top[best] + q.bot[best]) / 2) / dpr, px: q.bot[best] - q.top[best] };
    },
    /* The last draw's layout as shares of the plot (0: left or bottom
     * edge, 1: right or top): where the marked steps run (from the first
     * mark to the last event), the top of the tallest allocated stack, the
     * reserved bytes above the plot (0 if none), the events left of it. */
    get layout() {
      if (!plot) return null;
      const xs = (v) => (v - view.v0) / (view.v1 - view.v0);
      let amax = 0;
      for (const s of plot.st) if (s !== -2) amax = Math.max(amax, allocAt(s));
      return {
        stepsFrom: meta.marks.length ? xs(xOf(meta.marks[0][0])) : null,
        stepsTo: nE ? xs(xOf(nE - 1)) : null,
        allocTop: (amax - plot.y0) / (plot.y1 - plot.y0),
        reservedAbove: plot.rAbove,
        leftOut,
      };
    },
    /* The plot's size in canvas pixels (idAt's coordinates). */
    get plotSize() { return plot ? { rows: plot.PH, cols: plot.PW } : { rows: 0, cols: 0 }; },
    /* The last draw's level of detail and y range. */
    get lod() { return lastLod; },
    /* Force the draw's window mode on or off (null: as the view asks) and
     * the sweep's checkpoints off (false) or back (true); for tests that
     * compare what each way draws. */
    lodModes(windowMode, checkpoints) {
      lodWindow = windowMode;
      if (checkpoints === false) ckpt.ready = false;
      else if (checkpoints === true && !ckpt.ready) buildCheckpoints();
    },
    get checkpointsReady() { return ckpt.ready; },
    /* What the draw's sweep holds at each of the axis states `states`
     * (ascending), reset at the first as a draw would be with the given
     * level of detail (window: LONG_W or 0; checkpoints used or not): per
     * state the exact allocations in stacking order and, per site, the
     * small ones' bytes, count and bytes past their last use. */
    sweepStates(states, opts) {
      const keep = ckpt.ready;
      if (!opts.checkpoints) ckpt.ready = false;
      const timeMode = view.mode === 'time';
      dsw.reset(opts.minBytes, opts.minW, timeMode, opts.sel ?? -1, states[0], opts.window ? LONG_W : 0);
      ckpt.ready = keep;
      const col = columnSums(), recent = [], out = [];
      for (const s of states) {
        const t = timeAt(s);
        dsw.column(s, t, col, recent);
        const exact = [];
        for (let i = 0; i < dsw.len; i++) {
          const l = dsw.list[i], v = dsw.st[l];
          if (v === LOD_EXACT) exact.push(l);
        }
        exact.push(...recent);
        const sites = [];
        for (let k = 0; k < NS; k++) {
          const n = dsw.siteN[k] + col.N[k];
          if (n) sites.push([k, dsw.siteB[k] + col.B[k], n, dsw.siteLB[k] + col.LB[k], dsw.siteLN[k] + col.LN[k]]);
        }
        col.clear();
        out.push({ s, exact, sites });
      }
      return out;
    },
    /* The allocated bytes after axis event e, and the state a column over
     * the events [e0, e1) shows (the first highest, else the one before). */
    allocAt: (e) => allocAt(e),
    peakIn: (e0, e1) => peakIn(allocCurve, e0, e1, e0 - 1, allocAt(e0 - 1)),
    /* The axis positions of the sweep's checkpoints. */
    get checkpointPositions() { return ckpt.pos.slice(); },
    /* The last draw's id buffer (lifetime + 1, -(summary + 1), 0) and its
     * summary records, to compare two draws of the same view. */
    drawn() {
      if (!plot) return null;
      const q = plot.sum;
      return { ids: Array.from(plot.ids), sum: q.site.map((k, r) => [k, q.n[r], q.bytes[r], q.linger[r], q.state[r], q.col[r], q.top[r], q.bot[r]]) };
    },
    get yRange() { return { y0: plot ? plot.y0 : 0, y1: plot ? plot.y1 : 0, mode: view.yMode, locked: view.yMode === 'lock' }; },
    /* Client x of an x-axis value (ns or event index) in the last draw. */
    clientXOf(v) {
      if (!plot) return null;
      const rr = tl.getBoundingClientRect();
      return rr.left + (plot.L + ((v - view.v0) / (view.v1 - view.v0)) * plot.PW) / dpr;
    },
    /* Where lifetime l starts on the x axis (ns or event index). */
    startOf(l) { return view.mode === 'time' ? timeAt(lAlloc[l]) : lAlloc[l] + 0.5; },
    /* The first view's x range (the run), as [v0, v1]. */
    get fullRange() { return runRange(); },
    /* Show [v0, v1] on the x axis (ns or event index) and draw now. */
    zoomTo(v0, v1) { view.v0 = v0; view.v1 = v1; clampView(); drawTimeline(); },
    view,
    redraw: drawTimeline,
  };
})();
