/*
 * viz/sweep.js - what a timeline draw walks (inlined by `vramtrace viz`
 * after ticks.js, before the timeline's script, timeline_*.js, which calls
 * vtSweep.create once with the page's decoded columns and sweep index).
 *
 * A sweep brings the allocations alive forward event by event, in
 * allocation order (makeSweep); the draw's own sweep (dsw) also decides
 * each allocation's level of detail: an exact band, or its call site's
 * summary. What a redraw walks stays bounded on 10M-event pages: a column
 * touches only the allocations alive at its moment (dsw.to); a draw starts
 * from the last checkpoint of the sweep before its window
 * (buildCheckpoints); zoomed out, the list keeps only the long-lived
 * allocations and each column takes the recent ones from the index
 * (window mode, longIdx); small ones with a finding wait in a heap by
 * their last use; bands below the y range are skipped a block at a time.
 * Each draws what the plain sweep from the first event draws (tests/viz:
 * lod_window_and_checkpoints_draw_what_the_sweep_draws).
 */
'use strict';

const vtSweep = Object.freeze({
  /* The sweeps over a page's allocations. `ix`: their count nL, the axis
   * events nE, the nBefore allocated before the window (first), per
   * allocation its axis index of allocation and release (lAlloc, lEnd; nE:
   * never released), bytes (lSize), call site (lSiteC), time from which it
   * is hatched (lLinger) and finding (lFinding, -1: none); the sweep index
   * (startOff: allocations born per event, in allocation order; endOff and
   * endL: released per event); each site's stacking rank (siteRank, NS
   * sites); the device filter (use, updated in place) and lifeWidth(l,
   * timeMode), how long an allocation lives on the x axis. */
  create(ix) {
    const {
      nL, nE, nBefore, lAlloc, lEnd, lSize, lSiteC, lLinger, lFinding, startOff, endOff, endL,
      siteRank, NS, use, lifeWidth,
    } = ix;

    /* The live allocations in allocation order, brought forward event by event.
     * Freed ones are flagged dead and squeezed out once they are the majority.
     * `keep`: which lifetimes it follows (the device filter's, or the
     * external storages). */
    const makeSweep = (keep) => ({
      list: new Int32Array(nL),
      on: new Uint8Array(nL),
      len: 0, dead: 0, pos: 0,
      reset() {
        this.on.fill(0);
        this.len = 0; this.dead = 0; this.pos = 0;
        for (let l = 0; l < nBefore; l++) if (keep[l]) { this.list[this.len++] = l; this.on[l] = 1; }
      },
      /* State right after axis event s (s = -1: before the first event). */
      to(s) {
        if (s + 1 < this.pos) this.reset();
        const list = this.list, on = this.on;
        if (s >= this.pos) {
          // Born up to s and still alive after it (one born and freed on the
          // way never enters); then the ones alive before that died.
          for (let j = startOff[this.pos], j1 = startOff[s + 1]; j < j1; j++) {
            if (keep[j] && lEnd[j] > s) { list[this.len++] = j; on[j] = 1; }
          }
          for (let j = endOff[this.pos], j1 = endOff[s + 1]; j < j1; j++) {
            const l = endL[j];
            if (on[l]) { on[l] = 0; this.dead++; }
          }
        }
        if (s + 1 > this.pos) this.pos = s + 1;
        if (this.dead > 256 && this.dead * 2 > this.len) {
          let n = 0;
          for (let i = 0; i < this.len; i++) if (on[list[i]]) list[n++] = list[i];
          this.len = n; this.dead = 0;
        }
      },
      alive() {
        const out = [];
        for (let i = 0; i < this.len; i++) if (this.on[this.list[i]]) out.push(this.list[i]);
        return out;
      },
    });

    /* Checkpoints of the sweep: the allocations alive (passing the device
     * filter) at some axis positions, so a draw of a window late in the run
     * starts from the last checkpoint before it instead of walking every
     * event from the start. One is kept once the events since the last one
     * outnumber the allocations alive at the last one, so each holds at most
     * twice the events since the one before (all of them at most twice the
     * events), and a draw starting from one adds about as many allocations
     * as it would walk events. Built after the first paint (and
     * again after a device filter change); until then draws start at 0. */
    const ckpt = { pos: [0], off: [0], ids: new Int32Array(0), ready: false, pending: false };
    function buildCheckpoints() {
      const pos = [], off = [];
      let ids = new Int32Array(Math.max(1024, nBefore * 2)), n = 0;
      const s = makeSweep(use);
      s.reset();
      let last = -Infinity;
      for (let e = 0; e <= nE; e++) {
        if (e - last >= Math.max(4096, s.len - s.dead)) {
          s.to(e - 1);
          const alive = s.len - s.dead;
          if (n + alive > ids.length) {
            const grown = new Int32Array(Math.max(ids.length * 2, n + alive));
            grown.set(ids.subarray(0, n));
            ids = grown;
          }
          pos.push(e); off.push(n);
          for (let i = 0; i < s.len; i++) if (s.on[s.list[i]]) ids[n++] = s.list[i];
          last = e;
        }
      }
      off.push(n);
      ckpt.pos = pos; ckpt.off = off; ckpt.ids = ids; ckpt.ready = true;
    }
    /* Checkpoints for the filter now, built once the page has drawn. */
    function checkpointsLater() {
      ckpt.ready = false;
      if (ckpt.pending) return;
      ckpt.pending = true;
      setTimeout(() => { ckpt.pending = false; buildCheckpoints(); }, 0);
    }

    /* Zoomed out, a column spans thousands of events, and most allocations
     * are born and freed between two columns' moments. The draw then keeps
     * in its list only the "long" allocations, those alive for LONG_W events
     * or more (and those allocated before the window), and takes the ones
     * born in the last LONG_W events before each column's moment straight
     * from the sweep index: the same allocations alive there, in the same
     * (allocation) order, for the cost of the long ones plus LONG_W per
     * column instead of every event in view. LONG_W is the smallest power of
     * two from 64 up that leaves at most a sixteenth of the allocations long. */
    const longIdx = (() => {
      const hist = new Float64Array(32);
      let forever = 0;
      for (let l = 0; l < nL; l++) {
        if (lAlloc[l] < 0 || lEnd[l] >= nE) forever++;
        else hist[31 - Math.clz32(Math.max(1, lEnd[l] - lAlloc[l]))]++;
      }
      let j = 31, count = forever;
      const bound = Math.max(nL / 16, 1024);
      while (j > 6 && count + hist[j - 1] <= bound) count += hist[--j];
      const w = 2 ** Math.min(Math.max(j, 6), 20);
      const isLong = (l) => lAlloc[l] < 0 || lEnd[l] >= nE || lEnd[l] - lAlloc[l] >= w;
      let n = 0, m = 0;
      for (let l = 0; l < nL; l++) if (isLong(l)) { n++; if (lEnd[l] < nE) m++; }
      const byAlloc = new Int32Array(n), byEnd = new Int32Array(m);
      n = 0; m = 0;
      for (let l = 0; l < nL; l++) if (isLong(l)) byAlloc[n++] = l;
      for (let j2 = 0, j1 = endOff[nE]; j2 < j1; j2++) if (isLong(endL[j2])) byEnd[m++] = endL[j2];
      return { w, byAlloc, byEnd };
    })();
    const LONG_W = longIdx.w;

    /* The draw's sweep: like `sweep`, but an allocation that is small at this
     * zoom never enters the list; it only moves its site's sums. A small one
     * with a finding is hatched from its last use on: it waits in a heap by
     * that time and moves to its site's hatched sums (state LOD_SMALL_PAST)
     * when a column's time passes it, as columns only go forward. The list
     * is cut in blocks of BLK slots with their exact bytes (blkB), so a
     * column skips whole blocks of bands below the y range (a zoom into the
     * activity on top of a large base) in one step. */
    const LOD_OFF = 0, LOD_EXACT = 1, LOD_SMALL_PAST = 2, LOD_SMALL = 3;
    const BLK_SHIFT = 6, BLK = 1 << BLK_SHIFT;
    const dsw = {
      list: new Int32Array(nL),
      st: new Uint8Array(nL),          // LOD_* per lifetime
      at: new Int32Array(nL),          // its slot in list
      blkB: new Float64Array((nL >> BLK_SHIFT) + 2),   // exact bytes alive per block of slots
      len: 0, dead: 0, pos: 0,
      siteB: new Float64Array(NS),     // bytes of LOD_SMALL allocations alive, per site
      siteN: new Int32Array(NS),       // their count
      siteLB: new Float64Array(NS),    // of siteB, the bytes past their last use (LOD_SMALL_PAST)
      siteLN: new Int32Array(NS),      // their count
      heap: [],                        // small ones with a finding not yet past it, by lLinger
      siteOn: new Uint8Array(NS),      // site is in `act`
      act: [], dirty: false,           // sites that may have small ones alive
      minBytes: 0, minW: 0, timeMode: true, sel: -1,
      win: 0, iA: 0, iD: 0,            // window mode: LONG_W, next long one by alloc, by end
      /* Ready to walk from the last checkpoint at or before axis state s0;
       * `win` (LONG_W or 0): the list holds only the long allocations born
       * `win` events or more before the state (see longIdx). */
      reset(minBytes, minW, timeMode, sel, s0, win) {
        this.st.fill(0); this.siteB.fill(0); this.siteN.fill(0); this.siteOn.fill(0);
        this.siteLB.fill(0); this.siteLN.fill(0); this.heap.length = 0;
        this.blkB.fill(0);
        this.act = []; this.dirty = false;
        this.len = 0; this.dead = 0; this.pos = 0;
        this.minBytes = minBytes; this.minW = minW; this.sel = sel;
        this.timeMode = timeMode;
        this.win = win;
        let k = ckpt.ready ? lowerBound(ckpt.pos, ckpt.pos.length, s0 + 2) - 1 : -1;
        if (win) {
          const lim = s0 - win, A = longIdx.byAlloc, E = longIdx.byEnd;
          this.iA = 0;
          if (k >= 0) {
            // From the checkpoint: the ones alive at s0 born by lim; the long
            // ones born after both come through iA.
            const ids = ckpt.ids;
            for (let i = ckpt.off[k], i1 = ckpt.off[k + 1]; i < i1; i++) {
              const l = ids[i];
              if ((lAlloc[l] < 0 || lAlloc[l] <= lim) && lEnd[l] > s0) this.add(l);
            }
            const from = Math.max(0, Math.min(ckpt.pos[k], lim + 1));
            let lo = 0, hi = A.length;
            while (lo < hi) { const m = (lo + hi) >>> 1; if (lAlloc[A[m]] < from) lo = m + 1; else hi = m; }
            this.iA = lo;
          }
          let lo = 0, hi = E.length;
          while (lo < hi) { const m = (lo + hi) >>> 1; if (lEnd[E[m]] <= s0) lo = m + 1; else hi = m; }
          this.iD = lo;
          this.pos = s0;
          return;
        }
        if (k < 0) {
          for (let l = 0; l < nBefore; l++) this.add(l);
          return;
        }
        const ids = ckpt.ids;
        for (let i = ckpt.off[k], i1 = ckpt.off[k + 1]; i < i1; i++) this.add(ids[i]);
        this.pos = ckpt.pos[k];
      },
      site(k) {
        if (!this.siteOn[k]) { this.siteOn[k] = 1; this.act.push(k); this.dirty = true; }
      },
      add(l) {
        if (!use[l]) return;
        const small = l !== this.sel && (lSize[l] < this.minBytes || lifeWidth(l, this.timeMode) < this.minW);
        const k = lSiteC[l];
        if (!small) {
          this.at[l] = this.len; this.blkB[this.len >> BLK_SHIFT] += lSize[l];
          this.list[this.len++] = l; this.st[l] = LOD_EXACT;
        } else {
          this.st[l] = LOD_SMALL; this.siteB[k] += lSize[l]; this.siteN[k]++; this.site(k);
          if (lFinding[l] >= 0 && lLinger[l] < Infinity) this.heapPush(l);
        }
      },
      heapPush(l) {
        const h = this.heap, key = lLinger[l];
        let i = h.length;
        h.push(l);
        while (i > 0) {
          const p = (i - 1) >> 1;
          if (lLinger[h[p]] <= key) break;
          h[i] = h[p]; i = p;
        }
        h[i] = l;
      },
      heapPop() {
        const h = this.heap, top = h[0], last = h.pop();
        if (h.length) {
          const key = lLinger[last];
          let i = 0;
          for (;;) {
            let c = 2 * i + 1;
            if (c >= h.length) break;
            if (c + 1 < h.length && lLinger[h[c + 1]] < lLinger[h[c]]) c++;
            if (lLinger[h[c]] >= key) break;
            h[i] = h[c]; i = c;
          }
          h[i] = last;
        }
        return top;
      },
      /* Small ones alive whose last use is at or before time t: hatched. */
      past(t) {
        while (this.heap.length && lLinger[this.heap[0]] <= t) {
          const l = this.heapPop();
          if (this.st[l] !== LOD_SMALL) continue;   // freed since
          this.st[l] = LOD_SMALL_PAST;
          const k = lSiteC[l];
          this.siteLB[k] += lSize[l]; this.siteLN[k]++;
        }
      },
      /* The state right after axis event s, s never before the last one:
       * only the allocations alive at s are touched (a zoomed-out column
       * jumps over thousands born and freed inside it), then the ones alive
       * before that died. */
      to(s) {
        if (this.win) { this.toWin(s); return; }
        if (s >= this.pos) {
          for (let j = startOff[this.pos], j1 = startOff[s + 1]; j < j1; j++) if (lEnd[j] > s) this.add(j);
          for (let j = endOff[this.pos], j1 = endOff[s + 1]; j < j1; j++) this.drop(endL[j]);
        }
        if (s + 1 > this.pos) this.pos = s + 1;
        if (this.dead > 256 && this.dead * 2 > this.len) this.squeeze();
      },
      /* The state after axis event s as a column draws it: to(s), then in
       * window mode the allocations born in the last `win` events and alive
       * after s, the small ones into the column's sums `col`, the others (in
       * allocation order, after the list's) into `recent`. */
      column(s, t, col, recent) {
        this.to(s);
        this.past(t);
        recent.length = 0;
        if (!this.win) return;
        for (let l = startOff[Math.max(0, s - this.win + 1)], l1 = startOff[s + 1]; l < l1; l++) {
          if (!use[l] || lEnd[l] <= s) continue;
          if (l === this.sel || (lSize[l] >= this.minBytes && lifeWidth(l, this.timeMode) >= this.minW)) recent.push(l);
          else col.add(l, t);
        }
      },
      /* Window mode: the long ones born by s - win and alive after s in, the
       * long ones freed by s out. */
      toWin(s) {
        const A = longIdx.byAlloc, E = longIdx.byEnd, lim = s - this.win;
        while (this.iA < A.length) {
          const l = A[this.iA];
          if (lAlloc[l] >= 0 && lAlloc[l] > lim) break;
          this.iA++;
          if (lEnd[l] > s) this.add(l);
        }
        while (this.iD < E.length && lEnd[E[this.iD]] <= s) this.drop(E[this.iD++]);
        if (this.dead > 256 && this.dead * 2 > this.len) this.squeeze();
      },
      drop(l) {
        const v = this.st[l];
        if (v === LOD_OFF) return;
        this.st[l] = LOD_OFF;
        if (v !== LOD_EXACT) {
          const k = lSiteC[l];
          this.siteB[k] -= lSize[l]; this.siteN[k]--;
          if (v === LOD_SMALL_PAST) { this.siteLB[k] -= lSize[l]; this.siteLN[k]--; }
          return;
        }
        this.blkB[this.at[l] >> BLK_SHIFT] -= lSize[l];
        this.dead++;
      },
      /* Drop the freed from the list, renumbering slots and blocks. */
      squeeze() {
        const st = this.st, list = this.list;
        let n = 0;
        for (let i = 0; i < this.len; i++) if (st[list[i]]) list[n++] = list[i];
        this.len = n; this.dead = 0;
        this.blkB.fill(0);
        for (let i = 0; i < n; i++) {
          const l = list[i];
          this.at[l] = i;
          this.blkB[i >> BLK_SHIFT] += lSize[l];
        }
      },
      /* Sites with small allocations alive, in stacking order. */
      sites() {
        if (this.dirty) {
          const keep = [];
          for (const k of this.act) {
            if (this.siteN[k] > 0) keep.push(k); else this.siteOn[k] = 0;
          }
          keep.sort((a, b) => siteRank[a] - siteRank[b]);
          this.act = keep; this.dirty = false;
        }
        return this.act;
      },
    };

    /* One column's sums per site of small allocations it counts itself
     * (with findings: past their last use or not at the column's time t). */
    function columnSums() {
      return {
        B: new Float64Array(NS), N: new Int32Array(NS),     // bytes, count
        LB: new Float64Array(NS), LN: new Int32Array(NS),   // ... of which past their last use
        touched: [],                                        // sites with any
        add(l, t) {
          const k = lSiteC[l];
          if (this.N[k] === 0) this.touched.push(k);
          this.B[k] += lSize[l]; this.N[k]++;
          if (lLinger[l] <= t) { this.LB[k] += lSize[l]; this.LN[k]++; }
        },
        clear() {
          for (const k of this.touched) { this.B[k] = 0; this.N[k] = 0; this.LB[k] = 0; this.LN[k] = 0; }
          this.touched.length = 0;
        },
      };
    }

    function lowerBound(arr, n, x) {
      let lo = 0, hi = n;
      while (lo < hi) { const m = (lo + hi) >>> 1; if (arr[m] < x) lo = m + 1; else hi = m; }
      return lo;
    }

    return {
      makeSweep, buildCheckpoints, checkpointsLater, ckpt, LONG_W, dsw, columnSums, lowerBound,
      BLK, BLK_SHIFT, LOD_OFF, LOD_EXACT,
    };
  },
});
