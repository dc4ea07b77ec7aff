/*
 * viz/ranks.js - the page of several ranks (`vramtrace viz A B ... -o OUT`,
 * cli/viz_ranks.c): a rank selector, each rank's own timeline page shown in
 * an iframe, and an overview of every rank's allocated bytes on one time
 * axis, by wall clock or from each rank's first mark (a training step).
 *
 * Plain, dependency-free JavaScript, inlined in the page as the timeline's script is.
 * Its data: #vt-ranks (JSON, one object per rank from viz/rank_data.c:
 * rank, file, peak, points [[wall ms, allocated bytes]], marks [[wall ms,
 * label]], pauses [[wall ms, wall ms]]: the time vramtrace paused the
 * program, shaded grey as each rank's page shades it) and one base64
 * script element per rank page (data-rank-page).
 * The overview is an SVG drawn at the size it is shown (no stretching), with
 * axes, ticks, a legend and a tooltip giving every rank's bytes at the
 * cursor's moment.
 */
'use strict';

(function () {
  const $ = (id) => document.getElementById(id);
  const R = JSON.parse($('vt-ranks').textContent);
  const pages = Array.from(document.querySelectorAll('script[data-rank-page]'));
  const colors = ['#2b6cb0', '#c05621', '#2f855a', '#9b2c2c', '#6b46c1', '#b7791f', '#2c7a7b', '#97266d'];
  const colorOf = (i) => colors[i % colors.length];
  const NS = 'http://www.w3.org/2000/svg';

  function fmt(b) {
    if (b < 1024) return b + ' B';
    if (b < 1048576) return (b / 1024).toFixed(1) + ' KiB';
    if (b < 1073741824) return (b / 1048576).toFixed(1) + ' MiB';
    return (b / 1073741824).toFixed(2) + ' GiB';
  }
  /* A time axis value (ms) as a tick label precise enough for `step` ms. */
  function fmtMs(ms, step) {
    const big = Math.abs(step) >= 1000 || Math.abs(ms) >= 10000;
    const v = big ? ms / 1000 : ms, s = big ? step / 1000 : step;
    const decimals = Math.max(0, Math.min(6, Math.ceil(-Math.log10(s) - 1e-9)));
    return v.toFixed(decimals) + (big ? ' s' : ' ms');
  }
  const { niceStep, niceBytesStep } = vtTicks;   /* viz/ticks.js */
  function el(name, attrs, text) {
    const e = document.createElementNS(NS, name);
    for (const k in attrs) e.setAttribute(k, attrs[k]);
    if (text != null) e.textContent = text;
    return e;
  }

  $('title').textContent = R.length + ' ranks';
  let current = -1;
  function show(i) {
    if (i === current) return;
    current = i;
    const bin = atob(pages[i].textContent.trim());
    const bytes = new Uint8Array(bin.length);
    for (let k = 0; k < bin.length; k++) bytes[k] = bin.charCodeAt(k);
    $('view').srcdoc = new TextDecoder().decode(bytes);
    document.querySelectorAll('#ranks button').forEach((b, k) => b.classList.toggle('sel', k === i));
    draw();
  }
  const nav = $('ranks');
  R.forEach((r, i) => {
    const b = document.createElement('button');
    b.textContent = 'rank ' + r.rank + ' (' + fmt(r.peak) + ')';
    b.title = r.file;
    b.dataset.rank = r.rank;
    b.style.borderLeft = '6px solid ' + colorOf(i);
    b.onclick = () => show(i);
    nav.appendChild(b);
  });

  // Aligning at the first mark needs marks: say so where they are missing.
  const align = $('align');
  const unmarked = R.filter((r) => !r.marks.length).map((r) => 'rank ' + r.rank);
  if (unmarked.length === R.length) {
    const opt = align.querySelector('option[value="mark"]');
    opt.disabled = true;
    opt.textContent = 'first mark (step): no marks recorded';
    align.title = 'no rank recorded a mark (vramtrace.mark(), or the steps a framework marks): wall clock only';
  }
  function alignNote() {
    const byMark = align.value === 'mark';
    const note = !byMark ? ''
      : unmarked.length === R.length ? 'no rank has marks: aligned by wall clock'
      : unmarked.length ? unmarked.join(', ') + (unmarked.length === 1 ? ' has' : ' have') + ' no marks: drawn from the first event'
      : '';
    $('align-note').textContent = note;
  }
  // By mark: a rank without marks starts at its first event.
  const offset = (r) => (r.marks.length ? r.marks[0][0] : r.points.length ? r.points[0][0] : 0);

  const M = { l: 66, r: 14, t: 24, b: 22 };
  let geo = null;   // the last drawing's scales, for the tooltip
  function draw() {
    alignNote();
    const svg = $('overview');
    while (svg.firstChild) svg.removeChild(svg.firstChild);
    const W = Math.max(200, svg.clientWidth || 1000), H = Math.max(80, svg.clientHeight || 190);
    svg.setAttribute('viewBox', '0 0 ' + W + ' ' + H);
    const byMark = align.value === 'mark' && unmarked.length < R.length;
    // Wall clock: from the earliest point of any rank; by mark: 0 is each
    // rank's first mark.
    let base = Infinity;
    if (!byMark) for (const r of R) for (const p of r.points) base = Math.min(base, p[0]);
    if (!isFinite(base)) base = 0;
    let t0 = Infinity, t1 = -Infinity, ymax = 1;
    for (const r of R) {
      const o = byMark ? offset(r) : base;
      for (const p of r.points) { t0 = Math.min(t0, p[0] - o); t1 = Math.max(t1, p[0] - o); ymax = Math.max(ymax, p[1]); }
    }
    if (!isFinite(t0)) { t0 = 0; t1 = 1; }
    if (!(t1 > t0)) t1 = t0 + 1;
    const pad = (t1 - t0) * 0.01;
    t0 -= pad; t1 += pad;
    ymax *= 1.06;
    const PW = W - M.l - M.r, PH = H - M.t - M.b;
    const X = (t) => M.l + ((t - t0) / (t1 - t0)) * PW;
    const Y = (b) => M.t + PH - (b / ymax) * PH;
    geo = { t0, t1, PW, PH, byMark, base, X };

    // Axes: bytes on the left, time below, light grid lines.
    const ys = niceBytesStep(ymax, Math.max(2, Math.floor(PH / 32)));
    for (let v = 0; v <= ymax; v += ys) {
      const y = Math.round(Y(v)) + 0.5;
      svg.appendChild(el('line', { x1: M.l, x2: M.l + PW, y1: y, y2: y, stroke: '#eee', class: 'grid' }));
      svg.appendChild(el('line', { x1: M.l - 4, x2: M.l, y1: y, y2: y, stroke: '#999', class: 'tick' }));
      svg.appendChild(el('text', { x: M.l - 6, y: y + 4, 'text-anchor': 'end', class: 'ylabel' }, fmt(v)));
    }
    const xs = niceStep(t1 - t0, Math.max(2, Math.floor(PW / 110)));
    for (let v = Math.ceil(t0 / xs) * xs; v <= t1; v += xs) {
      const x = Math.round(X(v)) + 0.5;
      svg.appendChild(el('line', { x1: x, x2: x, y1: M.t + PH, y2: M.t + PH + 4, stroke: '#999', class: 'tick' }));
      svg.appendChild(el('text', { x, y: M.t + PH + 16, 'text-anchor': 'middle', class: 'xlabel' },
        (byMark && v > 0 ? '+' : '') + fmtMs(Math.abs(v) < xs / 1e6 ? 0 : v, xs)));
    }
    svg.appendChild(el('rect', { x: M.l - 0.5, y: M.t - 0.5, width: PW + 1, height: PH + 1, fill: 'none', stroke: '#999' }));
    if (byMark) {
      const x = Math.round(X(0)) + 0.5;
      svg.appendChild(el('line', { x1: x, x2: x, y1: M.t, y2: M.t + PH, stroke: '#5a1ea0', 'stroke-dasharray': '3 3' }));
    }

    // The tool's pauses, under the curves: grey, as wide as each lasted,
    // left out under a pixel (the page of each rank draws them too).
    R.forEach((r, i) => {
      const o = byMark ? offset(r) : base;
      for (const [a, b] of r.pauses || []) {
        const x0 = Math.max(M.l, X(a - o)), x1 = Math.min(M.l + PW, X(b - o));
        if (!(x1 - x0 >= 1)) continue;
        const band = el('rect', { x: x0.toFixed(1), y: M.t, width: (x1 - x0).toFixed(1), height: PH,
          fill: '#888', 'fill-opacity': 0.2, class: 'pause' });
        band.dataset.rank = r.rank;
        band.appendChild(el('title', {}, 'rank ' + r.rank + ': vramtrace paused ' + fmtMs(b - a, 0.1) +
          ' (not the program\u2019s time)'));
        svg.appendChild(band);
      }
    });

    R.forEach((r, i) => {
      const o = byMark ? offset(r) : base;
      const pts = [];
      let prev = Y(0);
      for (const p of r.points) {
        const x = X(p[0] - o).toFixed(1), y = Y(p[1]);
        pts.push(x + ',' + prev.toFixed(1), x + ',' + y.toFixed(1));
        prev = y;
      }
      const pl = el('polyline', { points: pts.join(' '), fill: 'none', stroke: colorOf(i),
        'stroke-width': i === current ? '2.5' : '1' });
      pl.dataset.rank = r.rank;
      pl.style.cursor = 'pointer';
      pl.onclick = () => show(i);
      pl.appendChild(el('title', {}, 'rank ' + r.rank + ': peak ' + fmt(r.peak)));
      svg.appendChild(pl);
    });

    // Legend: what the curves are, the time axis, one swatch per rank.
    const lg = el('g', { class: 'legend' });
    let lx = M.l;
    const caption = 'allocated bytes per rank, time ' + (byMark ? 'from each rank\u2019s first mark' : 'by wall clock since the first event');
    lg.appendChild(el('text', { x: lx, y: 14, class: 'caption' }, caption));
    lx += caption.length * 6.2 + 16;
    R.forEach((r, i) => {
      const item = el('g', { class: 'item', 'data-rank': r.rank });
      item.appendChild(el('rect', { x: lx, y: 6, width: 14, height: 3 + (i === current ? 2 : 0), fill: colorOf(i) }));
      const label = 'rank ' + r.rank;
      item.appendChild(el('text', { x: lx + 18, y: 14 }, label));
      item.style.cursor = 'pointer';
      item.onclick = () => show(i);
      lg.appendChild(item);
      lx += 18 + label.length * 6.5 + 14;
    });
    if (svg.querySelector('rect.pause')) {
      const item = el('g', { class: 'pause-legend' });
      item.appendChild(el('rect', { x: lx, y: 4, width: 14, height: 10, fill: '#888', 'fill-opacity': 0.35 }));
      item.appendChild(el('text', { x: lx + 18, y: 14 }, 'vramtrace paused (not the program\u2019s time)'));
      lg.appendChild(item);
    }
    svg.appendChild(lg);
    svg.appendChild(el('line', { id: 'cross', x1: -10, x2: -10, y1: M.t, y2: M.t + PH, stroke: '#555', 'stroke-dasharray': '2 2' }));
  }

  /* Allocated bytes of rank r at axis time t: its last point at or before t. */
  function bytesAt(r, t) {
    const o = geo.byMark ? offset(r) : geo.base;
    const p = r.points;
    let lo = 0, hi = p.length;
    while (lo < hi) { const m = (lo + hi) >> 1; if (p[m][0] - o <= t) lo = m + 1; else hi = m; }
    return lo ? p[lo - 1][1] : null;
  }
  const svg = $('overview'), tip = $('ov-tip');
  svg.addEventListener('mousemove', (ev) => {
    if (!geo) return;
    const box = svg.getBoundingClientRect();
    const x = ev.clientX - box.left;
    const cross = $('cross');
    if (x < M.l || x > M.l + geo.PW) { tip.hidden = true; cross.setAttribute('x1', -10); cross.setAttribute('x2', -10); return; }
    const t = geo.t0 + ((x - M.l) / geo.PW) * (geo.t1 - geo.t0);
    cross.setAttribute('x1', x); cross.setAttribute('x2', x);
    const lines = R.map((r, i) => {
      const b = bytesAt(r, t);
      return '<span style="color:' + colorOf(i) + '">\u25a0</span> rank ' + r.rank + ': ' + (b == null ? 'not started' : fmt(b));
    });
    tip.innerHTML = '<b>' + (geo.byMark ? (t >= 0 ? '+' : '') + fmtMs(t, 1) + ' from the first mark' : fmtMs(t, 1) + ' since the first event') +
      '</b><br>' + lines.join('<br>');
    tip.hidden = false;
    const r = tip.getBoundingClientRect();
    let left = ev.clientX + 14;
    if (left + r.width > innerWidth) left = ev.clientX - r.width - 14;
    tip.style.left = left + 'px';
    tip.style.top = (ev.clientY + 14) + 'px';
  });
  svg.addEventListener('mouseleave', () => {
    tip.hidden = true;
    const cross = $('cross');
    if (cross) { cross.setAttribute('x1', -10); cross.setAttribute('x2', -10); }
  });
  align.onchange = draw;
  window.addEventListener('resize', draw);
  let highest = 0;
  R.forEach((r, i) => { if (r.peak > R[highest].peak) highest = i; });
  show(highest);
})();
