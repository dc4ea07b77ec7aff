/*
 * viz/timeline_plot.js - the device timeline's canvas: the moment each
 * pixel column shows (the curve's block maxima), the y range, the draw
 * itself (bands, summary bands, the reserved line), its axes, the events
 * left of the view, one band's column and the selected moment.
 *
 * Part of the timeline page's one script function: see timeline_data.js.
 */
  // ------------------------------------------------------------- canvases
  const $ = (id) => document.getElementById(id);
  const tl = $('tl'), seg = $('seg'), flame = $('flame'), ext = $('ext');
  const tip = $('tooltip');
  const M = { l: 66, r: 10, t: 16, b: 20 };   // plot margins, CSS px
  let dpr = 1;
  let plot = null;   // geometry + per-column states + id buffer of the last draw

  function sizeCanvas(c) {
    const r = c.parentElement.getBoundingClientRect();
    // Exactly the CSS box: a bigger backing store would be squeezed into it
    // (distorted text on a short icicle).
    const w = Math.max(1, Math.round(r.width * dpr)), h = Math.max(1, Math.round(r.height * dpr));
    if (c.width !== w) c.width = w;
    if (c.height !== h) c.height = h;
  }

  /* Pick, for each pixel column, the axis state it shows: the moment inside
   * the column with the most bytes allocated (by `at` / `curve`: the device
   * filter's allocations, or the external storages). -2 = no data there. */
  function columnStates(PW, at = allocAt, curve = allocCurve) {
    const st = new Int32Array(PW);
    const span = view.v1 - view.v0;
    for (let c = 0; c < PW; c++) {
      const xa = view.v0 + (c / PW) * span, xb = view.v0 + ((c + 1) / PW) * span;
      let e0, e1, best;
      if (view.mode === 'event') {
        if (xb <= 0 || xa >= nE) { st[c] = -2; continue; }
        e0 = Math.max(0, Math.floor(xa));
        e1 = Math.min(nE, Math.max(e0 + 1, Math.ceil(xb)));
        best = e0;
      } else {
        if (xb < 0 || xa > lastT) { st[c] = -2; continue; }
        e0 = lowerBound(evT, nE, xa);
        e1 = lowerBound(evT, nE, xb);
        best = e0 - 1;                      // the state carried into the column
      }
      st[c] = peakIn(curve, e0, e1, best, at(best));
    }
    return st;
  }
  /* The first event of [e0, e1) where `curve` is highest, if above bv (the
   * value at `best`), else best. Whole blocks of PEAK_BLK events are
   * looked up in the curve's block maxima, so a zoomed-out column costs
   * its blocks, not its events. */
  const PEAK_SHIFT = 8, PEAK_BLK = 1 << PEAK_SHIFT;
  const peakBlocks = new Map();   // curve -> index of the first maximum of each block
  function blockPeaks(curve) {
    let m = peakBlocks.get(curve);
    if (m) return m;
    m = new Int32Array((curve.length >> PEAK_SHIFT) + 1);
    for (let b = 0; b < m.length; b++) {
      let best = b << PEAK_SHIFT;
      for (let e = best + 1, e1 = Math.min(curve.length, (b + 1) << PEAK_SHIFT); e < e1; e++) if (curve[e] > curve[best]) best = e;
      m[b] = best;
    }
    peakBlocks.set(curve, m);
    return m;
  }
  function peakIn(curve, e0, e1, best, bv) {
    let e = e0;
    if (e1 - e0 >= 2 * PEAK_BLK) {
      const m = blockPeaks(curve);
      for (; e & (PEAK_BLK - 1); e++) if (curve[e] > bv) { bv = curve[e]; best = e; }
      for (; e + PEAK_BLK <= e1; e += PEAK_BLK) {
        const k = m[e >> PEAK_SHIFT];
        if (curve[k] > bv) { bv = curve[k]; best = k; }
      }
    }
    for (; e < e1; e++) if (curve[e] > bv) { bv = curve[e]; best = e; }
    return best;
  }
  const xOf = (s) => (view.mode === 'time' ? timeAt(s) : s + 0.5);

  const { niceStep, niceBytesStep } = vtTicks;   /* viz/ticks.js */

  let drawCount = 0, firstPaint = 0, lastDrawMs = 0;
  let lodWindow = null;   // window mode: null as the view asks, true / false forced (tests)
  let lastLod = { exact: 0, summary: 0, minBytes: 0, minWidth: 0 };

  /* The y range to draw. 'fit': from 0 to the tallest allocated stack in
   * the visible columns; the reserved line (and a replay's) joins the range
   * only while it stays within RESERVED_ROOM of that stack, else it leaves
   * the top of the plot (drawTimeline says how high it goes): a cache that
   * holds twice what is allocated must not squash the bands into the bottom
   * of the plot. 'span': from a little below the lowest to a little above
   * the highest allocated total in view, so the activity of a deep zoom on
   * top of a large base fills the plot. 'lock': the range as it is. */
  const RESERVED_ROOM = 1.3;
  function yRange(st, PW) {
    if (view.yMode === 'lock' && view.y1 > view.y0) return [view.y0, view.y1];
    let amin = Infinity, amax = 0, rmax = 0;
    for (let c = 0; c < PW; c++) {
      if (st[c] === -2) continue;
      const a = allocAt(st[c]);
      rmax = Math.max(rmax, resvAt(st[c]), replayCurve && st[c] <= replayEnd ? replayAt(st[c]) : 0);
      amin = Math.min(amin, a);
      amax = Math.max(amax, a);
    }
    // Nothing allocated in view: the reserved line is all there is to show.
    const top = amax > 0 ? (rmax <= amax * RESERVED_ROOM ? Math.max(amax, rmax) : amax) : rmax;
    view.y0 = 0;
    view.y1 = Math.max(1, top) * 1.04;
    if (view.yMode === 'span' && amax > amin) {
      const pad = (amax - amin) * 0.08;
      view.y0 = Math.max(0, amin - pad);
      view.y1 = amax + pad;
    }
    return [view.y0, view.y1];
  }

  function drawTimeline() {
    const t0 = performance.now();
    sizeCanvas(tl);
    const W = tl.width, H = tl.height;
    const L = Math.round(M.l * dpr), R = Math.round(M.r * dpr), T = Math.round(M.t * dpr), B = Math.round(M.b * dpr);
    const PW = Math.max(1, W - L - R), PH = Math.max(1, H - T - B);
    const ctx = tl.getContext('2d');
    ctx.setTransform(1, 0, 0, 1, 0, 0);
    ctx.clearRect(0, 0, W, H);

    const st = columnStates(PW);
    const [y0, y1] = yRange(st, PW);
    const ys = PH / (y1 - y0);
    const yOf = (bytes) => Math.round(PH - (bytes - y0) * ys);   // plot row of a stack height

    const img = ctx.createImageData(PW, PH);
    const px = new Uint32Array(img.data.buffer);
    // > 0: lifetime + 1; < 0: -(summary record + 1); 0: nothing.
    const ids = new Int32Array(PW * PH);
    // Summary records: one per (column, site) band drawn.
    const sum = { site: [], n: [], bytes: [], linger: [], state: [], col: [], top: [], bot: [] };
    const sel = view.selected;
    // Small: thinner than one pixel row, or alive for less than one column.
    let s0 = nE, s1 = nE;
    for (let c = 0; c < PW; c++) if (st[c] !== -2) { s0 = st[c]; break; }
    for (let c = PW - 1; c >= 0; c--) if (st[c] !== -2) { s1 = st[c]; break; }
    // Window mode (sweep.js) once the view holds more events than a column
    // by column walk of the last LONG_W events costs.
    const win = lodWindow !== false && (lodWindow === true || s1 - s0 > PW * LONG_W) ? LONG_W : 0;
    const minBytes = 1 / ys, minW = (view.v1 - view.v0) / PW, timeMode = view.mode === 'time';
    dsw.reset(minBytes, minW, timeMode, sel, s0, win);
    const list = dsw.list, lst = dsw.st, blkB = dsw.blkB;
    // Small ones counted in this column only (with findings: past their last
    // use or not by the column's time; in window mode, all the recent ones).
    const col = columnSums();
    const { B: colB, N: colN, LB: colLB, LN: colLN, touched } = col;
    const recent = [];   // window mode: exact bands born in the last LONG_W events, after the list's
    let nExact = 0;
    for (let c = 0; c < PW; c++) {
      const s = st[c];
      if (s === -2) continue;
      const t = timeAt(s);
      dsw.column(s, t, col, recent);
      let off = 0, yPrev = PH;
      const n = dsw.len;
      for (let i = 0; i < n; i++) {
        if ((i & (BLK - 1)) === 0) {
          // Whole blocks whose bands all round below what is drawn: their
          // bytes only lift what comes after.
          let b = i >> BLK_SHIFT;
          while (i < n && yOf(off + blkB[b]) >= yPrev) { off += blkB[b]; i = ++b << BLK_SHIFT; }
          if (i >= n) break;
        }
        const l = list[i];
        const v = lst[l];
        if (v === LOD_OFF) continue;
        off += lSize[l];
        if (yPrev <= 0) break;              // the plot is full: nothing above shows
        let top = yOf(off);
        if (top < 0) top = 0;
        if (top >= yPrev) continue;         // below the y range (or rounded away)
        paintBand(px, ids, PW, c, top, yPrev, l, lLinger[l] <= t, l === sel);
        nExact++;
        yPrev = top;
      }
      for (let i = 0; i < recent.length && yPrev > 0; i++) {
        const l = recent[i];
        off += lSize[l];
        let top = yOf(off);
        if (top < 0) top = 0;
        if (top >= yPrev) continue;
        paintBand(px, ids, PW, c, top, yPrev, l, lLinger[l] <= t, l === sel);
        nExact++;
        yPrev = top;
      }
      // One summary band per site on top: the plain bytes, then the part
      // past its last use hatched. A site with only recent small ones
      // (window mode) is not among the sweep's.
      let sites = dsw.sites();
      if (win) {
        const extra = touched.filter((k) => !dsw.siteOn[k]);
        if (extra.length) sites = sites.concat(extra).sort((a, b) => siteRank[a] - siteRank[b]);
      }
      for (let i = 0; i < sites.length && yPrev > 0; i++) {
        const k = sites[i];
        const cnt = dsw.siteN[k] + colN[k];
        if (cnt === 0) continue;
        const lb = dsw.siteLB[k] + colLB[k];
        const plain = dsw.siteB[k] + colB[k] - lb;
        const bot = yPrev;
        const r = sum.site.length;
        for (let part = 0; part < 2; part++) {
          off += part ? lb : plain;
          if (part && !lb) break;
          let top = yOf(off);
          if (top < 0) top = 0;
          if (top >= yPrev) continue;
          const col = siteRGBA[k], dark = siteDark[k];
          for (let y = top; y < yPrev; y++) {
            const p = y * PW + c;
            if (part) px[p] = ((c + y) & 7) < 4 ? HATCH_A : HATCH_B;
            else px[p] = y === top && yPrev - top >= 4 ? dark : ((c | y) & 1) ? col : dark;
            ids[p] = -(r + 1);
          }
          yPrev = top;
        }
        if (yPrev < bot) {
          sum.site.push(k); sum.n.push(cnt); sum.bytes.push(plain + lb); sum.linger.push(dsw.siteLN[k] + colLN[k]);
          sum.state.push(s); sum.col.push(c); sum.top.push(yPrev); sum.bot.push(bot);
        }
      }
      col.clear();
    }
    ctx.putImageData(img, L, T);

    // Reserved memory as a line.
    ctx.save();
    ctx.beginPath(); ctx.rect(L, T - 1, PW, PH + 2); ctx.clip();
    ctx.strokeStyle = '#111';
    ctx.lineWidth = Math.max(1, dpr * 1.2);
    ctx.beginPath();
    let pen = false, rAbove = 0;
    for (let c = 0; c < PW; c++) {
      if (st[c] === -2) { pen = false; continue; }
      const r = resvAt(st[c]);
      if (r > y1) rAbove = Math.max(rAbove, r);
      const y = T + PH - (r - y0) * ys;
      if (!pen) { ctx.moveTo(L + c, y); pen = true; } else ctx.lineTo(L + c, y);
      ctx.lineTo(L + c + 1, y);
    }
    ctx.stroke();
    if (rAbove) {
      // The y range follows the allocated bytes: say where the cache went.
      ctx.fillStyle = '#111';
      ctx.font = (11 * dpr) + 'px system-ui, sans-serif';
      ctx.textBaseline = 'top';
      ctx.textAlign = 'right';
      ctx.fillText('\u25b2 reserved above the plot, up to ' + fmtBytes(rAbove), L + PW - 6 * dpr, T + 4 * dpr);
    }
    if (replayCurve) {
      // the replay's reserved bytes: dashed, until it ran out of memory
      ctx.strokeStyle = '#d9480f';
      ctx.setLineDash([4 * dpr, 3 * dpr]);
      ctx.beginPath();
      pen = false;
      for (let c = 0; c < PW; c++) {
        if (st[c] === -2 || st[c] > replayEnd) { pen = false; continue; }
        const y = T + PH - (replayAt(st[c]) - y0) * ys;
        if (!pen) { ctx.moveTo(L + c, y); pen = true; } else ctx.lineTo(L + c, y);
        ctx.lineTo(L + c + 1, y);
      }
      ctx.stroke();
      ctx.setLineDash([]);
      ctx.fillStyle = '#d9480f';
      ctx.font = (11 * dpr) + 'px system-ui, sans-serif';
      ctx.textBaseline = 'top';
      ctx.textAlign = 'left';
      ctx.fillText('- - replayed reserved: ' + replay.label, L + 6 * dpr, T + 4 * dpr);
    }
    ctx.restore();

    drawAxes(ctx, L, T, PW, PH, y0, y1, dpr);
    if (nL - nX === 0) {
      ctx.save();
      ctx.fillStyle = '#6b6b70';
      ctx.font = (13 * dpr) + 'px system-ui, sans-serif';
      ctx.textAlign = 'center';
      ctx.textBaseline = 'middle';
      ctx.fillText(nX ? 'no device allocation recorded; the ' + nX.toLocaleString() + ' tracked ' + (extKinds.join(', ') || 'external') +
        ' storage' + (nX === 1 ? ' is' : 's are') + ' in their own lane'
        : 'no allocation recorded in this snapshot' + (meta.marks.length ? ' (marks only)' : ''), L + PW / 2, T + PH / 2);
      ctx.restore();
    }
    pauseBands = drawPauses(ctx, L, T, PW, PH);
    drawMarks(ctx, L, T, PW, PH);
    drawTapePeaks(ctx, L, T, PW);
    drawOom(ctx, L, T, PW, PH);
    drawMoment(ctx, L, T, PW, PH);
    drawLeftOut(ctx, L, T, PH);
    plot = { L, T, PW, PH, st, ids, ys, y0, y1, sum, rAbove };
    // A zoom under a still mouse: what is under it changed.
    if (tipEv && !tip.hidden) timelineTip(tipEv);
    lastLod = { exact: nExact, summary: sum.site.length, minBytes, minWidth: minW, window: win };
    drawSegments(st, PW, L, R);
    drawExternal(L, R);
    drawCount++;
    lastDrawMs = performance.now() - t0;
    if (!firstPaint) {
      firstPaint = performance.now();
      performance.mark('vt-first-paint');
    }
  }

  function pxOfX(x, L, PW) { return L + ((x - view.v0) / (view.v1 - view.v0)) * PW; }

  function drawAxes(ctx, L, T, PW, PH, y0, y1, k) {
    ctx.fillStyle = '#6b6b70';
    ctx.strokeStyle = '#e3e3e8';
    ctx.lineWidth = 1;
    ctx.font = (11 * k) + 'px system-ui, sans-serif';
    ctx.textBaseline = 'middle';
    ctx.textAlign = 'right';
    const step = niceBytesStep(y1 - y0, Math.max(2, Math.floor(PH / (40 * k))));
    for (let v = Math.ceil(y0 / step) * step; v <= y1; v += step) {
      const y = Math.round(T + PH - ((v - y0) / (y1 - y0)) * PH) + 0.5;
      ctx.beginPath(); ctx.moveTo(L - 4 * k, y); ctx.lineTo(L, y); ctx.stroke();
      ctx.fillText(fmtBytesTick(v, step), L - 6 * k, y);
    }
    ctx.textAlign = 'center';
    ctx.textBaseline = 'top';
    const span = view.v1 - view.v0;
    const xs = niceStep(span, Math.max(2, Math.floor(PW / (110 * k))));
    for (let v = Math.ceil(view.v0 / xs) * xs; v <= view.v1; v += xs) {
      const x = Math.round(pxOfX(v, L, PW)) + 0.5;
      ctx.beginPath(); ctx.moveTo(x, T + PH); ctx.lineTo(x, T + PH + 4 * k); ctx.stroke();
      // Keep the label inside the canvas (the last tick often sits on the right edge).
      const label = view.mode === 'time' ? fmtTick(v, xs) : '#' + Math.round(v);
      const half = ctx.measureText(label).width / 2;
      ctx.fillText(label, Math.min(x, ctx.canvas.width - half - 1), T + PH + 5 * k);
    }
    ctx.strokeStyle = '#999';
    ctx.strokeRect(L - 0.5, T - 0.5, PW + 1, PH + 1);
  }

  /* The events left of the view (the first view leaves out a quiet start):
   * how many, over how long, at the plot's bottom left. */
  function drawLeftOut(ctx, L, T, PH) {
    const before = view.mode === 'time' ? lowerBound(evT, nE, view.v0) : Math.max(0, Math.min(nE, Math.ceil(view.v0 - 0.5)));
    leftOut = before;
    if (before === 0) return;
    const t = (view.mode === 'time' ? view.v0 : evT[before]) - evT[0];
    ctx.save();
    ctx.font = (11 * dpr) + 'px system-ui, sans-serif';
    ctx.textBaseline = 'bottom';
    ctx.textAlign = 'left';
    const text = '\u25c0 ' + before.toLocaleString() + ' event' + (before === 1 ? '' : 's') + ' in the ' + fmtTime(t) + ' before (show all)';
    const w = ctx.measureText(text).width;
    ctx.fillStyle = 'rgba(255, 255, 255, 0.85)';
    ctx.fillRect(L + 2 * dpr, T + PH - 17 * dpr, w + 8 * dpr, 15 * dpr);
    ctx.fillStyle = '#444';
    ctx.fillText(text, L + 6 * dpr, T + PH - 4 * dpr);
    ctx.restore();
  }
  let leftOut = 0;

  /* Column c of a plot, rows [top, yPrev): lifetime l's band in its site's
   * colour (a darker top edge when it is 4 rows or more), hatched once past
   * its last use (violet for a tape finding), amber when selected; ids
   * remember which lifetime each pixel shows. */
  function paintBand(px, ids, PW, c, top, yPrev, l, linger, selected) {
    const site = lSiteC[l];
    const col = selected ? SEL : siteRGBA[site];
    const edge = yPrev - top >= 4 ? (selected ? SEL_DARK : siteDark[site]) : col;
    for (let y = top; y < yPrev; y++) {
      const p = y * PW + c;
      if (linger) px[p] = ((c + y) & 7) < 4 ? (lTape[l] ? TAPE_A : HATCH_A) : (selected ? SEL : lTape[l] ? TAPE_B : HATCH_B);
      else px[p] = y === top ? edge : col;
      ids[p] = l + 1;
    }
  }

  /* The selected moment (view.moment), a dashed line across a plot. */
  function drawMoment(ctx, L, T, PW, PH) {
    if (view.moment <= -2) return;
    const x = pxOfX(xOf(view.moment), L, PW);
    if (x < L || x > L + PW) return;
    ctx.save();
    ctx.setLineDash([4 * dpr, 3 * dpr]);
    ctx.strokeStyle = '#2962ff';
    ctx.lineWidth = dpr;
    ctx.beginPath(); ctx.moveTo(x, T); ctx.lineTo(x, T + PH); ctx.stroke();
    ctx.restore();
  }
