/*
 * viz/timeline_icicle.js - the icicle of live bytes by call path at the
 * peak: the stack tree with the text views' folded frames taken out, and
 * its draw.
 *
 * Part of the timeline page's one script function: see timeline_data.js.
 */
  // -------------------------------------------------------------- icicle
  // Depth of every stack node (parents are not promised to come before
  // their children in the page's data).
  const kDepth = new Int32Array(nK).fill(-1);
  if (nK) kDepth[0] = 0;
  for (let k = 1; k < nK; k++) {
    const path = [];
    let j = k;
    while (j > 0 && kDepth[j] < 0 && path.length < 4096) { path.push(j); j = kParent[j]; }
    let d = j > 0 ? kDepth[j] : 0;
    for (let i = path.length - 1; i >= 0; i--) kDepth[path[i]] = ++d;
  }
  const kByDepth = Array.from({ length: nK }, (_, i) => i).sort((a, b) => kDepth[a] - kDepth[b]);
  // The icicle's tree: the stack prefix tree, less (unless view.flameAll)
  // the frames the text views fold (isFolded, as stackHTML does; a path
  // with Python frames folds the interpreter's own and torch's dispatch
  // plumbing): a folded node's bytes and callees go to its nearest kept
  // caller, and callees that then name the same frame there are one box.
  const flameTrees = {};
  function flameTree(all) {
    const key = all ? 'all' : 'folded';
    if (flameTrees[key]) return flameTrees[key];
    const fold = new Uint8Array(nK);
    let nfolded = 0;
    if (!all) {
      // A node is on a path with Python frames when one is at it, among
      // its callers (above) or among its callees (below).
      const above = new Uint8Array(nK), below = new Uint8Array(nK);
      for (const k of kByDepth) if (k > 0) above[k] = isPython(kFrame[k]) || above[kParent[k]] ? 1 : 0;
      for (let i = nK - 1; i >= 0; i--) {
        const k = kByDepth[i];
        if (k > 0 && (below[k] || isPython(kFrame[k]))) { below[k] = 1; below[kParent[k]] = 1; }
      }
      for (let k = 1; k < nK; k++) {
        const fr = kFrame[k];
        if (isFolded(fr, above[k] || below[k])) { fold[k] = 1; nfolded++; }
      }
    }
    const of = new Int32Array(nK);          // stack node -> tree node
    const parent = [0], frame = [0], rep = [0];   // per tree node; rep: a stack node of it
    const byKey = new Map();
    for (const k of kByDepth) {
      if (k === 0) continue;
      const p = of[kParent[k]];
      if (fold[k]) { of[k] = p; continue; }
      const id = p + ':' + kFrame[k];
      let d = byKey.get(id);
      if (d === undefined) {
        d = parent.length;
        byKey.set(id, d);
        parent.push(p); frame.push(kFrame[k]); rep.push(k);
      }
      of[k] = d;
    }
    return (flameTrees[key] = { n: parent.length, parent, frame, rep, of, nfolded });
  }
  let flameRects = [];
  function drawFlame() {
    sweep.reset();
    sweep.to(peakState);
    const T = flameTree(view.flameAll);
    const nT = T.n;
    const bytes = new Float64Array(nT);
    let total = 0;
    for (const l of sweep.alive()) { bytes[lSite[l] < nK ? T.of[lSite[l]] : 0] += lSize[l]; total += lSize[l]; }
    const cum = bytes.slice();
    for (let d = nT - 1; d > 0; d--) if (cum[d] > 0) cum[T.parent[d]] += cum[d];   // children after parents
    const children = new Map();
    for (let d = 1; d < nT; d++) {
      if (cum[d] <= 0) continue;
      const p = T.parent[d];
      if (!children.has(p)) children.set(p, []);
      children.get(p).push(d);
    }
    const root = view.flameRoot < nT && cum[view.flameRoot] > 0 ? view.flameRoot : 0;
    const tog = $('flame-all');
    tog.parentNode.hidden = flameTree(false).nfolded === 0;
    tog.checked = view.flameAll;
    const wrap = $('flame-wrap');
    const rowH = 17;
    let rows = 1;
    (function depthOf(k, d) {
      rows = Math.max(rows, d + 1);
      if (d > 60) return;
      for (const c of children.get(k) || []) depthOf(c, d + 1);
    })(root, 0);
    wrap.style.height = Math.min(Math.max(rows, 2) * rowH + 4, 640) + 'px';
    sizeCanvas(flame);
    const ctx = flame.getContext('2d');
    const W = flame.width;
    ctx.clearRect(0, 0, W, flame.height);
    ctx.font = (11 * dpr) + 'px system-ui, sans-serif';
    ctx.textBaseline = 'middle';
    flameRects = [];
    const rh = rowH * dpr;
    const rootBytes = cum[root] || 1;
    $('flame-label').textContent = peakState >= -1 && total > 0
      ? '(' + fmtBytes(total) + ' live at ' + (peakState < 0 ? 'start' : fmtTime(evT[peakState])) + ')' : '';
    function box(k, x, w, d) {
      if (w < 0.5) return;
      const y = d * rh;
      const frLabel = k === 0 ? 'all live allocations' : frameText(T.frame[k]).fn;
      const col = siteRGBA[T.rep[k]];
      ctx.fillStyle = k === 0 ? '#c9c9d1' : '#' + (col & 0xffffff).toString(16).padStart(6, '0').replace(/(..)(..)(..)/, '$3$2$1');
      ctx.fillRect(x, y, Math.max(w - 1, 0.5), rh - 1);
      if (w > 40 * dpr) {
        ctx.fillStyle = '#111';
        const label = frLabel + ' ' + fmtBytes(cum[k]);
        ctx.save();
        ctx.beginPath(); ctx.rect(x, y, w - 2, rh); ctx.clip();
        ctx.fillText(label, x + 3 * dpr, y + rh / 2);
        ctx.restore();
      }
      flameRects.push({ k, x, y, w, h: rh, bytes: cum[k], self: bytes[k] });
      if (d > 60) return;
      const ch = (children.get(k) || []).slice().sort((a, b) => cum[b] - cum[a]);
      let cx = x;
      for (const c of ch) {
        const cw = (cum[c] / cum[k]) * w;
        box(c, cx, cw, d + 1);
        cx += cw;
      }
    }
    if (total > 0) box(root, 0, (cum[root] / rootBytes) * W, 0);
    else { ctx.fillStyle = '#6b6b70'; ctx.fillText('nothing allocated', 6 * dpr, rh / 2); }
  }

