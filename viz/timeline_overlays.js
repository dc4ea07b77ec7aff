/*
 * viz/timeline_overlays.js - what is drawn over and beside the timeline:
 * the marks (steps), the out-of-memory line and its panel, the tape
 * findings' peaks, the lane of external storages and the segments plot.
 *
 * Part of the timeline page's one script function: see timeline_data.js.
 */
  /* `text` cut to at most `w` canvas pixels in ctx's font, with an ellipsis. */
  function fitText(ctx, text, w) {
    if (ctx.measureText(text).width <= w) return text;
    if (w < ctx.measureText('\u2026').width) return '';
    let lo = 0, hi = Math.min(text.length, 400);
    while (lo < hi) {
      const m = (lo + hi + 1) >> 1;
      if (ctx.measureText(text.slice(0, m) + '\u2026').width <= w) lo = m; else hi = m - 1;
    }
    return text.slice(0, lo) + '\u2026';
  }

  /* Mark i's label: the program's, or, where the steps are those the
   * backward passes of a run that marked none tell (as `check` steps it),
   * the step's number. */
  function markLabel(i) {
    return meta.marks_inferred ? 'backward ' + (i + 1) : str(meta.marks[i][1]);
  }

  function drawMarks(ctx, L, T, PW, PH) {
    ctx.save();
    ctx.font = (11 * dpr) + 'px system-ui, sans-serif';
    ctx.textBaseline = 'bottom';
    ctx.textAlign = 'left';
    // Only the marks in view: they are in axis order.
    const marks = meta.marks, xAt = (i) => Math.round(pxOfX(xOf(marks[i][0]), L, PW)) + 0.5;
    let i0 = 0, hi = marks.length;
    while (i0 < hi) { const m = (i0 + hi) >>> 1; if (xAt(m) < L) i0 = m + 1; else hi = m; }
    const xs = [];
    for (let i = i0; i < marks.length; i++) {
      const x = xAt(i);
      if (x > L + PW) break;
      xs.push([x, i]);
    }
    // Thousands of marks (one per step) would paint the plot over: then
    // draw ticks along the top edge and lines only where there is room,
    // each kind as one path (a path per mark costs more than the draw).
    const dense = xs.length > PW / (8 * dpr);
    ctx.strokeStyle = 'rgba(90, 30, 160, 0.75)';
    ctx.lineWidth = dpr;
    let lastLine = -1e9, lastRight = -1e9, lastTick = -1e9;
    if (dense) {
      const lines = new Path2D(), ticks = new Path2D();
      for (const [x] of xs) {
        if (x - lastLine >= 60 * dpr) {
          lines.moveTo(x, T); lines.lineTo(x, T + PH);
          lastLine = x;
        } else if (x !== lastTick) {
          ticks.moveTo(x, T); ticks.lineTo(x, T + 5 * dpr);
          lastTick = x;
        }
      }
      ctx.stroke(lines);
      ctx.stroke(ticks);
    } else {
      for (const [x] of xs) {
        ctx.beginPath();
        ctx.moveTo(x, T);
        ctx.lineTo(x, T + PH);
        ctx.stroke();
      }
    }
    ctx.fillStyle = '#5a1ea0';
    for (const [x, i] of xs) {
      if (x > lastRight + 4 * dpr) {
        // A long label is cut (with an ellipsis) so that it never hides
        // the labels of the marks after it nor runs off the plot.
        const text = fitText(ctx, markLabel(i), Math.min(240 * dpr, L + PW - x - 2 * dpr));
        ctx.fillText(text, x + 2 * dpr, T - 1 * dpr);
        lastRight = x + 2 * dpr + ctx.measureText(text).width;
      }
    }
    ctx.restore();
  }


  /* The tool's pauses (meta.pauses, [start, end] ns from the first event:
   * track()'s holder walks, a snapshot's): on the time axis a grey band
   * each, time that was not the program's (check judges the program's own
   * time without it); none on the event axis, where a pause has no width.
   * A pause under a pixel wide is left out: a mark's short one at every
   * step (0.1 ms) would grey a whole run zoomed out. Returns where they
   * were drawn ([x0, x1] in CSS px); the main timeline's are kept for the
   * tests (pauseBands). */
  const pauses = meta.pauses || [];
  let pauseBands = [];
  function drawPauses(ctx, L, T, PW, PH) {
    const bands = [];
    if (view.mode !== 'time' || !pauses.length) return bands;
    // the first pause ending in view: they are in time order
    let i = 0, hi = pauses.length;
    while (i < hi) { const m = (i + hi) >>> 1; if (pauses[m][1] < view.v0) i = m + 1; else hi = m; }
    ctx.save();
    ctx.fillStyle = 'rgba(96, 96, 96, 0.22)';
    for (; i < pauses.length && pauses[i][0] <= view.v1; i++) {
      const x0 = Math.max(L, pxOfX(pauses[i][0], L, PW));
      const x1 = Math.min(L + PW, pxOfX(pauses[i][1], L, PW));
      if (x1 - x0 < dpr) continue;
      ctx.fillRect(x0, T, x1 - x0, PH);
      bands.push([x0 / dpr, x1 / dpr]);
    }
    ctx.restore();
    return bands;
  }


  /* The out-of-memory (vramtrace oom, meta.oom): a red line across the
   * plot, labelled at its top; where it is drawn, for the tests. */
  const oom = meta.oom;
  let oomX = null;
  function oomShown() {
    if (!oom || oom.ax < 0) return false;
    const d = view.device >= 0 ? meta.devices[view.device] : null;
    return !d || d.ord === oom.x.request.device;
  }
  function drawOom(ctx, L, T, PW, PH) {
    oomX = null;
    if (!oomShown()) return;
    const x = Math.round(pxOfX(xOf(oom.ax), L, PW)) + 0.5;
    if (x < L || x > L + PW) return;
    oomX = x;
    ctx.save();
    ctx.strokeStyle = '#d32f2f';
    ctx.lineWidth = 2 * dpr;
    ctx.beginPath(); ctx.moveTo(x, T); ctx.lineTo(x, T + PH); ctx.stroke();
    ctx.fillStyle = '#d32f2f';
    ctx.font = 'bold ' + (11 * dpr) + 'px system-ui, sans-serif';
    ctx.textBaseline = 'top';
    const label = 'OOM: ' + fmtBytes(oom.x.request.size);
    const w = ctx.measureText(label).width;
    ctx.fillText(label, x + 3 * dpr + w > L + PW ? x - 3 * dpr - w : x + 3 * dpr, T + 2 * dpr);
    ctx.restore();
  }

  /* The OOM explained, as `vramtrace oom` says it: the request, the device,
   * what was alive by line, and what would have fit (only what the replay
   * verified as fixes). */
  function oomHTML(x) {
    const q = x.request, d = x.device, o = x.outside;
    const conf = (f) => f.kind === 'setting' ? (x.allocator === 'pytorch' ? 'PYTORCH_CUDA_ALLOC_CONF=' : 'VRAMTRACE_CONF=') + f.conf : f.conf;
    let h = '<div class="t">' + fmtBytes(q.size) + ' asked on cuda:' + q.device + ', stream ' + esc(q.stream) +
      (q.ooms_recorded > 1 ? ' (' + (q.index === 1 ? 'the first' : q.index === q.ooms_recorded ? 'the last' : 'OOM ' + q.index) +
        ' of ' + q.ooms_recorded + ' OOMs)' : '') + '</div>';
    h += '<div class="loc">' + esc(q.line || 'no stack recorded') + '</div>';
    if (q.library) h += '<div class="why">a library\'s own allocation, outside PyTorch\'s cache: the ' + fmtBytes(d.cache_free) +
      ' free in the cache could not serve it (torch.cuda.empty_cache() gives it back)</div>';
    const askedPool = q.private_pool;   /* asked into a private pool (absent in an older vramtrace's JSON) */
    if (askedPool) {
      h += '<div class="why">' + (askedPool.kind === 'program' ? 'asked into a private pool the program made (torch.cuda.MemPool, or a graph_pool_handle() CUDA graphs share)'
        : 'asked while ' + (askedPool.kind === 'compiled_capture' ? 'torch.compile\'s CUDA graphs were' : 'a CUDA graph was') + ' being captured') +
        (askedPool.line && askedPool.kind !== 'program' ? ' (captured at <span class="loc">' + esc(askedPool.line) + '</span>)' : '') +
        ': PyTorch serves it from that pool only, which keeps what it takes ' +
        (askedPool.kind === 'program' ? 'until the pool is deleted' : askedPool.kind === 'compiled_capture' ? 'until the graphs are released (torch._dynamo.reset())' : 'as long as the graph lives') + '</div>';
    }
    h += '<div>device: ' + fmtBytes(d.capacity) + (d.total ? '' : ' for this process') + ', ' + fmtBytes(d.free) + ' free at the OOM</div>';
    h += '<div>reserved ' + fmtBytes(d.reserved) + ': ' + fmtBytes(d.allocated) + ' allocated, ' +
      fmtBytes(d.pending_free) + ' pending free, ' + fmtBytes(d.cache_free) + ' free in the cache</div>';
    if (d.cache_free_pieces) {
      h += '<div>free in ' + d.cache_free_pieces + ' piece' + (d.cache_free_pieces === 1 ? '' : 's') + ', the largest ' +
        fmtBytes(d.largest_free) + '; <b>' + fmtBytes(d.free_in_smaller_pieces) + '</b> in pieces smaller than the request</div>';
    }
    const gp = d.graph_pools;   /* absent in an older vramtrace's JSON */
    if (gp && gp.reserved && gp.program_made) {
      h += '<div class="why">' + fmtBytes(gp.reserved) + ' held by ' + (gp.pools === 1 ? 'a private pool' : 'private pools') + ' the program made' +
        ' (' + fmtBytes(gp.free) + ' of it free)' + (gp.line ? ', first used at <span class="loc">' + esc(gp.line) + '</span>' : '') +
        ': PyTorch serves from it only what is asked into it (torch.cuda.MemPool, or CUDA graphs sharing a graph_pool_handle()), and gives it back only once it is deleted</div>';
    } else if (gp && gp.reserved) {
      h += '<div class="why">' + fmtBytes(gp.reserved) + ' held by ' + (gp.pools === 1 ? 'a CUDA graph\'s private pool' : 'CUDA graphs\' private pools') +
        ' (' + fmtBytes(gp.free) + ' of it free)' + (gp.line ? ', captured at <span class="loc">' + esc(gp.line) + '</span>' : '') +
        ': PyTorch serves from it only what is captured into it, and gives it back only once the graph is deleted</div>';
    }
    const out = [];
    if (o.libraries_reserved) out.push(fmtBytes(o.libraries_reserved) + ' for libraries\' own allocations');
    if (o.uncached) out.push(fmtBytes(o.uncached) + ' not served by the cache');
    if (o.other) out.push(fmtBytes(o.other) + ' other processes or contexts');
    h += '<div>outside the cache: ' + (out.length ? esc(out.join('; ')) : 'nothing seen') + '</div>';
    h += '<div class="t">alive: ' + fmtBytes(x.alive.bytes) + ' in ' + x.alive.count + ' allocation' + (x.alive.count === 1 ? '' : 's') + '</div><ol class="oom-lines">';
    const sited = (f) => f.rule === 'growth' ? 'grows ' + fmtBytes(f.growth_per_step) + (f.growth_window_ns ? ' per window' : ' per step')
      : f.rule === 'never-freed' ? 'never freed, ' + f.allocations + ' allocations' : 'outlives its siblings';
    x.alive.lines.slice(0, 6).forEach((s, i) => {
      h += '<li>' + fmtBytes(s.bytes) + ' &times;' + s.count + ' <span class="loc">' + esc(s.line || 'no stack') + '</span>' +
        (s.flagged ? '<div class="why">check: ' + s.flagged + ' alive after their last use (' + fmtBytes(s.flagged_bytes) + ')' +
          (s.held_by ? '; held by ' + esc(s.held_by) : '') + '</div>' : s.tensor ? '<div class="none">' + esc(s.tensor) + '</div>'
          : s.site_finding ? '<div class="why">check: ' + esc(sited(s.site_finding)) + '</div>' : '') +
        (x.alive.piled_up === i ? '<div class="why"><b>piled up before the OOM</b>: a fix for this request only moves the OOM later while it grows</div>' : '') +
        '</li>';
    });
    h += '</ol>';
    const hc = x.held_since_caught;
    if (hc) h += '<div class="why"><b>' + fmtBytes(hc.bytes) + '</b> of them made by <span class="loc">' + esc(hc.call) +
      '</span>, which ran out of memory at the OOM before (event ' + hc.event + ') and was caught: while the except clause runs, ' +
      'the exception keeps that call\'s frames and tensors alive (retry after it)</div>';
    const rp = x.replay;
    if (rp.error) return h + '<div class="none">not replayed: ' + esc(rp.error) + '</div>';
    h += '<div class="t">what would have fit, replayed in ' + fmtBytes(rp.capacity) +
      (rp.rules === 'pytorch' ? ' (PyTorch\'s rules)' : ' (vramtrace\'s rules)') + '</div>';
    if (!rp.reproduced) h += '<div class="why">the replay of the recorded settings does not run out of memory there: no fix is verified</div>';
    const fixes = x.fixes.filter((f) => f.verified), tried = x.fixes.filter((f) => !f.verified);
    h += fixes.length ? '<ul class="fixes">' + fixes.map((f) => '<li class="fix">' + esc(conf(f)) + ' <span class="sub">fits, peak reserved ' +
      fmtBytes(f.peak_reserved) + '</span></li>').join('') + '</ul>' : '<div class="none">nothing tried fits</div>';
    if (tried.length) h += '<div>tried, would not fit:</div><ul class="tried">' + tried.map((f) => '<li>' + esc(conf(f)) +
      ' <span class="sub">' + (f.error ? esc(f.error) : (f.fits ? 'fits in replay, not verified' : 'OOM at event ' + f.oom_event) +
        ', peak reserved ' + fmtBytes(f.peak_reserved)) + '</span></li>').join('') + '</ul>';
    return h;
  }
  function showOom() {
    if (!oom) return;
    $('oom-panel').hidden = false;
    $('oom').innerHTML = oomHTML(oom.x);
    $('oom-go').addEventListener('click', () => {
      view.moment = oom.ax;
      showTop();
      schedule();
    });
  }

  /* A tape finding's step peak (the moment it was alive and idle at):
   * a violet triangle on the plot's top edge. */
  function drawTapePeaks(ctx, L, T, PW) {
    if (!tapePeaks.length) return;
    ctx.save();
    ctx.fillStyle = '#8e24aa';
    let last = -1e9;
    for (const t of tapePeaks.slice().sort((a, b) => a - b)) {
      const x = Math.round(pxOfX(view.mode === 'time' ? t : lowerBound(evT, nE, t) + 0.5, L, PW));
      if (x < L || x > L + PW || x - last < 3 * dpr) continue;
      last = x;
      ctx.beginPath();
      ctx.moveTo(x - 4 * dpr, T); ctx.lineTo(x + 4 * dpr, T); ctx.lineTo(x, T + 7 * dpr); ctx.closePath();
      ctx.fill();
    }
    ctx.restore();
  }

  /* The lane of the storages vramtrace did not allocate: bands stacked in
   * allocation order, coloured by call site, under the same x axis as the
   * device timeline; the top of the stack is their memory curve. Every
   * band is exact (a band thinner than a pixel still adds its height). */
  let extPlot = null;
  function drawExternal(L, R) {
    if (!nX) return;
    sizeCanvas(ext);
    const W = ext.width, H = ext.height;
    const T = Math.round(M.t * dpr), B = Math.round(M.b * dpr);
    const PW = Math.max(1, W - L - R), PH = Math.max(1, H - T - B);
    const ctx = ext.getContext('2d');
    ctx.setTransform(1, 0, 0, 1, 0, 0);
    ctx.clearRect(0, 0, W, H);
    const st = columnStates(PW, extAt, extCurve);
    let ymax = 1;
    for (let c = 0; c < PW; c++) if (st[c] !== -2) ymax = Math.max(ymax, extAt(st[c]));
    ymax *= 1.04;
    const ys = PH / ymax;
    const img = ctx.createImageData(PW, PH);
    const px = new Uint32Array(img.data.buffer);
    const ids = new Int32Array(PW * PH);
    const sel = view.selected;
    xsweep.reset();
    const list = xsweep.list, on = xsweep.on;
    for (let c = 0; c < PW; c++) {
      const s = st[c];
      if (s === -2) continue;
      xsweep.to(s);
      const t = timeAt(s);
      let off = 0, yPrev = PH;
      for (let i = 0, n = xsweep.len; i < n && yPrev > 0; i++) {
        const l = list[i];
        if (!on[l]) continue;
        off += lSize[l];
        let top = Math.round(PH - off * ys);
        if (top < 0) top = 0;
        if (top >= yPrev) continue;
        paintBand(px, ids, PW, c, top, yPrev, l, lLinger[l] <= t, l === sel);
        yPrev = top;
      }
    }
    ctx.putImageData(img, L, T);
    drawAxes(ctx, L, T, PW, PH, 0, ymax, dpr);
    drawPauses(ctx, L, T, PW, PH);
    drawMarks(ctx, L, T, PW, PH);
    drawTapePeaks(ctx, L, T, PW);
    drawMoment(ctx, L, T, PW, PH);
    extPlot = { L, T, PW, PH, st, ids };
    if (extTipEv && !tip.hidden) extTip(extTipEv);
  }

  function drawSegments(st, PW, L, R) {
    sizeCanvas(seg);
    const W = seg.width, H = seg.height;
    const T = Math.round(6 * dpr), B = Math.round(18 * dpr);
    const PH = Math.max(1, H - T - B);
    const ctx = seg.getContext('2d');
    ctx.clearRect(0, 0, W, H);
    let ymax = 1;
    for (let c = 0; c < PW; c++) if (st[c] !== -2) ymax = Math.max(ymax, resvAt(st[c]), allocAt(st[c]));
    ymax *= 1.05;
    const ys = PH / ymax;
    for (let c = 0; c < PW; c++) {
      const s = st[c];
      if (s === -2) continue;
      const a = allocAt(s), r = Math.max(resvAt(s), a);
      const ya = ys * a, yr = ys * r;
      ctx.fillStyle = '#4f7fd8';
      ctx.fillRect(L + c, T + PH - ya, 1, ya);
      ctx.fillStyle = '#f0b35a';
      ctx.fillRect(L + c, T + PH - yr, 1, yr - ya);
      // CUDA graphs' pools: the top of the reserved bytes, in violet (their
      // free bytes are kept for the graphs' replays, not the cache's)
      const yp = Math.min(ys * poolAt(s), yr);
      if (yp > 0) {
        ctx.fillStyle = 'rgba(120, 60, 220, 0.6)';
        ctx.fillRect(L + c, T + PH - yr, 1, yp);
      }
    }
    drawAxes(ctx, L, T, PW, PH, 0, ymax, dpr);
    segPlot = { L, T, PW, PH, st };
  }
  let segPlot = null;

