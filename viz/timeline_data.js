/*
 * viz/timeline_data.js - the vramtrace timeline page's script (inlined by
 * `vramtrace viz`): what the page is, and its data decoded.
 *
 * Plain, dependency-free JavaScript. The data comes from two tags the
 * renderer (viz/render.c) fills: #vt-meta (JSON: strings, frames, marks,
 * findings, section sizes) and #vt-data (base64 of little-endian unsigned
 * LEB128 varint columns, one section per column, deflated when the renderer
 * had zlib). Everything is decoded into typed arrays once (what only hover,
 * the panels and the table read, after the first paint); nothing per
 * allocation ever becomes a DOM node.
 *
 * The page is one self-contained, offline HTML file without a module
 * loader, so the script is one function whose state all its parts share.
 * Each part is a file of its own, and the page holds them concatenated in
 * the order viz/meson.build lists them: this one opens the function and
 * decodes the data; timeline_names.js (labels, colours), timeline_state.js
 * (the view, the curves), timeline_plot.js (the timeline's canvas),
 * timeline_overlays.js (marks, the OOM, the external lane, segments),
 * timeline_icicle.js, timeline_panels.js (the panels and the findings),
 * timeline_interaction.js (tooltips, zoom, pan, controls) follow, and
 * timeline_start.js paints and closes it. A part alone is not a script.
 * What stands alone is in scripts of its own inlined before them (ticks.js:
 * axis ticks; sweep.js: what a draw walks).
 *
 * Drawing is a raster sweep: for each pixel column the renderer picks the
 * moment inside that column with the most bytes allocated (so peaks never
 * vanish when zoomed out), brings the live allocations up to that moment and
 * stacks them bottom-up. Level of detail is decided once per draw, per
 * allocation: one that would be thinner than a pixel (bytes / bytes-per-row)
 * or live for less than a pixel column is "small" and only adds its bytes to
 * its call site's running sum, kept up to date event by event; every other
 * allocation is an exact band, stacked in allocation order. Above the exact
 * bands each call site with small allocations alive gets one summary band
 * (dotted, in the site's colour, as tall as those bytes), in the order of
 * the site's first allocation. So a column costs O(exact bands + sites),
 * never O(live allocations), and zooming in (x or y) turns summaries back
 * into exact bands. An id buffer remembers which allocation or summary owns
 * each pixel, so hover and click are O(1).
 *
 * What a redraw walks stays bounded on 10M-event pages: a column's moment
 * comes from the allocated curve's block maxima (peakIn), the sweeps and
 * their level of detail are viz/sweep.js's (inlined before this script).
 *
 * Storages vramtrace did not allocate (a CPU tensor's under track()) are
 * lifetimes too, on page devices after the CUDA ones: never in the device
 * curves, the sweeps or the table, drawn in a lane of their own
 * (drawExternal) on the same x axis, every band exact.
 *
 * The first view is the run (runRange): from its first busy moment to its
 * last event. The y range fits the tallest allocated stack in view on every
 * draw (the reserved line joins it when close above, else leaves the top),
 * or the span of the allocated total in view, or is locked (the "y"
 * select); shift+wheel zooms bytes around the cursor (and locks), dragging
 * pans y while it is locked.
 */
'use strict';

(async function () {
  // ------------------------------------------------------------------ data
  const meta = JSON.parse(document.getElementById('vt-meta').textContent);
  const S = meta.strings;
  const str = (i) => (i > 0 && i < S.length ? S[i] : '');

  function base64Bytes(text) {
    if (typeof Uint8Array.fromBase64 === 'function') return Uint8Array.fromBase64(text);
    const bin = atob(text);
    const n = bin.length;
    const u = new Uint8Array(n);
    for (let i = 0; i < n; i++) u[i] = bin.charCodeAt(i);
    return u;
  }

  /* The columns: base64 of their bytes, deflated when the renderer had
   * zlib (meta.deflated), inflated natively. The page text is dropped once
   * read: a 10M-event page would hold it twice. */
  async function columnBytes() {
    const el = document.getElementById('vt-data');
    const raw = base64Bytes(el.textContent);
    el.textContent = '';
    if (!meta.deflated) return raw;
    if (typeof DecompressionStream !== 'function') {
      throw new Error('vramtrace: this browser cannot inflate the page\'s data (no DecompressionStream): open it in a current one');
    }
    const inflated = new Response(raw).body.pipeThrough(new DecompressionStream('deflate'));
    return new Uint8Array(await new Response(inflated).arrayBuffer());
  }
  const blob = await columnBytes();
  const sections = {};
  {
    let p = 0;
    for (const [name, len, rle] of meta.sec) {
      sections[name] = [p, p + len, rle];
      p += len;
    }
    if (p !== blob.length) throw new Error('vramtrace: data size ' + blob.length + ' != ' + p);
  }

  /* Decode `count` values of column `name` into `out`: unsigned varints,
   * or (value, run length) varint pairs for a run-length column. Values up
   * to 2^53 stay exact (no 32-bit shifts). With `sum` ({zig, scale, bias}),
   * a delta column summed as it is decoded: out[i] = (the first i + 1
   * values summed, zigzag-signed if zig) * scale + bias. Returns out. */
  function varints(name, count, out, sum) {
    const u = blob;
    const [start, end, rle] = sections[name];
    let p = start;
    let i = 0, acc = 0;
    const sumPlain = sum && !rle;
    while (i < count && p < end) {
      let b = u[p++];
      let v = b & 127;
      if (b >= 128) {
        let mul = 128;
        do {
          b = u[p++];
          v += (b & 127) * mul;
          mul *= 128;
        } while (b >= 128);
      }
      if (!rle) {
        out[i++] = sumPlain ? (acc += sum.zig ? unzig(v) : v) * sum.scale + sum.bias : v;
        continue;
      }
      b = u[p++];
      let run = b & 127;
      for (let mul = 128; b >= 128; mul *= 128) {
        b = u[p++];
        run += (b & 127) * mul;
      }
      const stop = Math.min(count, i + run);
      out.fill(v, i, stop);
      i = stop;
    }
    if (p > end || i < count) throw new Error('vramtrace: column ' + name + ' is damaged');
    if (sum && rle) {
      for (let j = 0; j < count; j++) out[j] = (acc += sum.zig ? unzig(out[j]) : out[j]) * sum.scale + sum.bias;
    }
    return out;
  }
  function unzig(v) { return v % 2 === 0 ? v / 2 : -(v + 1) / 2; }

  const nE = meta.nAxis;           // events on the x axis (allocator events)
  const nL = meta.nLife;           // allocations (lifetimes)
  const nK = meta.nStack;          // stack nodes

  // Axis: time of each event, ns since the first one.
  const evT = new Float64Array(nE);
  varints('ev_dt', nE, evT, { zig: false, scale: meta.tq > 1 ? meta.tq : 1, bias: 0 });
  const lastT = Math.max(nE ? evT[nE - 1] : 0, meta.info.snapshotTime || 0, 1);

  // Lifetimes, columnar. Each loop over the events or the allocations runs
  // in a small function of its own ((() => { ... })()): V8 never optimizes a
  // function as large as this page's, and its loops would run interpreted.
  const lAlloc = new Int32Array(nL);    // axis index of the alloc, -1 before the window
  const lEnd = new Int32Array(nL);      // axis index of the release, nE if never
  const lSize = new Float64Array(nL);
  const lSite = new Uint32Array(nL);    // allocation stack node
  const lDev = new Uint32Array(nL);     // index into meta.devices
  const lFlags = new Uint8Array(nL);
  const lLinger = new Float64Array(nL).fill(Infinity); // time from which a band is hatched
  const lFinding = new Int32Array(nL).fill(-1);
  const lTape = new Uint8Array(nL);     // its hatch is a tape finding's (violet)
  (() => {
    // Decoded in place: positions and their deltas fit 32 bits, flags 8.
    varints('l_pos', nL, lAlloc, { zig: true, scale: 1, bias: -1 });
    varints('l_end', nL, lEnd);
    for (let i = 0; i < nL; i++) lEnd[i] = lEnd[i] === 0 ? nE : lEnd[i] + lAlloc[i] - 1;
    varints('l_size', nL, lSize);
    const sizeMul = Math.pow(2, meta.sizeShift || 0);
    if (sizeMul > 1) for (let i = 0; i < nL; i++) lSize[i] *= sizeMul;
    varints('l_site', nL, lSite);
    varints('l_dev', nL, lDev);
    varints('l_flags', nL, lFlags);
  })();
  // The detail columns: what hover, the panels and the table read, never a
  // draw. Decoded after the first paint (detail()), or at the first hover or
  // click before that: a 10M-event page shows its timeline first.
  const lReq = new Float64Array(nL);
  const lFree = new Uint32Array(nL);    // free stack node
  const lName = new Uint32Array(nL);    // tensor name (string)
  const lStream = new Uint32Array(nL);  // index into meta.streams
  const lAddr = new Float64Array(nL);
  let detailDecoded = false;
  function detail() {
    if (detailDecoded) return;
    detailDecoded = true;
    const tmp = new Float64Array(nL);
    varints('l_req', nL, tmp);
    for (let i = 0; i < nL; i++) lReq[i] = tmp[i] === 0 ? 0 : lSize[i] - tmp[i] + 1;
    varints('l_fstk', nL, lFree);
    varints('l_name', nL, lName);
    varints('l_stream', nL, lStream);
    varints('l_addr', nL, tmp);
    let a = 0;
    const addrMul = Math.pow(2, meta.addrShift || 0);
    for (let i = 0; i < nL; i++) {
      a += unzig(tmp[i]);
      lAddr[i] = a * addrMul;
    }
  }
  // Storages vramtrace did not allocate (a CPU tensor's under track(),
  // vt_storage_external): lifetimes on page devices after the CUDA ones,
  // drawn in their own lane, never in the device curves. Per one: its last
  // use (ns, -1: never), uses and tensors bound, as the checker counts them.
  const nDev = meta.devices.length;
  const nX = meta.nExt || 0;
  const extKinds = meta.extKinds || [];
  const isExt = (l) => lDev[l] >= nDev;
  const extKind = (l) => extKinds[lDev[l] - nDev] || 'external';
  const xRow = new Int32Array(nL).fill(-1);
  const xUse = new Float64Array(nX), xNuse = new Float64Array(nX), xNt = new Float64Array(nX);
  if (nX) (() => {
    varints('x_use', nX, xUse);
    varints('x_nuse', nX, xNuse);
    varints('x_nt', nX, xNt);
    for (let i = 0; i < nX; i++) xUse[i] = xUse[i] === 0 ? -1 : (xUse[i] - 1) * (meta.tq || 1);
    for (let l = 0, k = 0; l < nL; l++) if (isExt(l)) xRow[l] = k++;
  })();
  const FL_ALIVE = 1, FL_BEFORE = 2, FL_PENDING = 4, FL_FREE_LOST = 8;
  const FL_FREE_UNSEEN = 32, FL_AFTER = 64;
  // Not one of an observed framework allocator's (PyTorch's) blocks: one of
  // its segments or a library's own buffer (cuBLAS), in the reserved line
  // and never in the allocated bytes, as the framework and `summary` count.
  const FL_OUTSIDE_POOL = 128;

  // Extra streams (record_stream), sparse: lifetime -> [stream index...].
  const extraStreams = new Map();
  (() => {
    const sec = sections.l_xs;
    const vals = [];
    for (let p = sec[0]; p < sec[1];) {
      let b = blob[p++], v = b & 127, mul = 128;
      while (b >= 128) { b = blob[p++]; v += (b & 127) * mul; mul *= 128; }
      vals.push(v);
    }
    let p = 0, l = 0;
    for (let k = 0; k < meta.nXs && p < vals.length; k++) {
      l += vals[p++];
      const cnt = vals[p++];
      extraStreams.set(l, vals.slice(p, p + cnt));
      p += cnt;
    }
  })();

  // Stack prefix tree: node -> (parent, frame).
  const kParent = new Uint32Array(nK);
  const kFrame = new Uint32Array(nK);
  (() => {
    const tmp = new Float64Array(2 * nK);
    varints('stk', 2 * nK, tmp);
    for (let i = 0; i < nK; i++) {
      kParent[i] = tmp[2 * i];
      kFrame[i] = tmp[2 * i + 1];
    }
  })();
  const F = meta.frames;

  // Reserved bytes per device: sparse steps (axis position, value).
  const devCurves = [];
  (() => {
    let total = 0;
    for (const d of meta.devices) total += d.npoints;
    const tmp = new Float64Array(2 * total);
    varints('curves', 2 * total, tmp);
    let p = 0;
    for (const d of meta.devices) {
      const pos = new Int32Array(d.npoints);
      const val = new Float64Array(d.npoints);
      let ax = 0;
      for (let k = 0; k < d.npoints; k++) {
        ax += tmp[p++];
        pos[k] = ax - 1;   // -1: the state before the first event
        val[k] = tmp[p++];
      }
      devCurves.push({ pos, val });
    }
  })();
  // Of them, CUDA graphs' private pools' (format 1.14), the same way; none
  // without a pool (no section).
  const devPools = [];
  if (sections.pools) {
    let total = 0;
    for (const d of meta.devices) total += d.npools || 0;
    const tmp = new Float64Array(2 * total);
    varints('pools', 2 * total, tmp);
    let p = 0;
    for (const d of meta.devices) {
      const n = d.npools || 0, pos = new Int32Array(n), val = new Float64Array(n);
      let ax = 0;
      for (let k = 0; k < n; k++) {
        ax += tmp[p++];
        pos[k] = ax - 1;
        val[k] = tmp[p++];
      }
      devPools.push({ pos, val });
    }
  }

  // Findings: mark the part of each band after its last use. A call-site
  // finding (`ls`) covers several allocations, each from its own moment.
  const findings = meta.findings;
  findings.forEach((f, i) => {
    const from = f.from != null ? f.from : (f.lastUse != null ? f.lastUse : null);
    const members = f.ls ? f.ls : (f.l >= 0 ? [[f.l, from]] : []);
    for (const [l, t] of members) {
      if (l < 0 || l >= nL) continue;
      if (lFinding[l] < 0) lFinding[l] = i;
      if (f.kind === 'tape' && lFinding[l] === i) lTape[l] = 1;
      if (t != null) lLinger[l] = Math.min(lLinger[l], t);
    }
  });

  // Sweep index: which lifetimes start / end at each axis event.
  let nBefore = 0;
  while (nBefore < nL && lAlloc[nBefore] < 0) nBefore++;
  const startOff = new Int32Array(nE + 1);   // lifetimes are in alloc order
  (() => {
    let l = nBefore;
    for (let e = 0; e <= nE; e++) {
      while (l < nL && lAlloc[l] < e) l++;
      startOff[e] = l;
    }
  })();
  const endOff = new Int32Array(nE + 1);     // counting sort by end event
  const endL = new Int32Array(nL);
  (() => {
    for (let l = 0; l < nL; l++) if (lEnd[l] < nE) endOff[lEnd[l] + 1]++;
    for (let e = 0; e < nE; e++) endOff[e + 1] += endOff[e];
    // Placed with each start as the cursor, which leaves it at the next
    // start: shifted back by one, without a copy of the offsets.
    for (let l = 0; l < nL; l++) if (lEnd[l] < nE) endL[endOff[lEnd[l]]++] = l;
    for (let e = nE; e > 0; e--) endOff[e] = endOff[e - 1];
    endOff[0] = 0;
  })();

