// cudatap report: the timeline. Reads the page's data (the JSON in
// #cudatap-data, written by export/html) and draws every thread and stream
// row on a canvas: calls, GPU ops (solid: measured; hatched: bounded, ran
// somewhere within its bounds; outlined: no bound), synchronizations,
// dependencies, NVML and memory series on the same time axis. Outside
// the detail window rows show their occupancy per time bucket.
(function () {
  'use strict';
  var D = JSON.parse(document.getElementById('cudatap-data').textContent);
  var S = D.strings;
  // Fields of the slice arrays (export/html/timeline.go).
  var H = { row: 0, start: 1, dur: 2, name: 3, cat: 4, seq: 5, sync: 6, blocked: 7, stream: 8, bytes: 9, hold: 10, tid: 11, flags: 12, kernel: 13 };
  var O = { row: 0, start: 1, dur: 2, name: 3, cat: 4, timing: 5, enq: 6, proven: 7, id: 8, call: 9, tid: 10, bytes: 11, after: 12, afterStart: 13, afterRow: 14, device: 15, stream: 16, kind: 17, shape: 18 };
  var Y = { row: 0, start: 1, blocked: 2, kind: 3, stream: 4, queued: 5, polls: 6, api: 7, hint: 8 };

  var HOST_COLORS = ['#4e79a7', '#59a14f', '#e15759', '#9c755f', '#a0a4ab', '#c9c9c9'];
  var HOST_CATS = ['launch', 'copy', 'sync', 'mem', 'other', 'held'];
  var GPU_COLORS = { kernel: '#4e79a7', copy: '#59a14f', comm: '#d37295', other: '#a0a4ab' };
  var GPU_CATS = ['kernel', 'copy', 'comm', 'other'];
  var SERIES_COLORS = ['#2f6f9f', '#e15759', '#59a14f', '#b07aa1'];
  var ROW_H = { host: 30, gpu: 28, counter: 40, group: 20 };

  // Rows and their slices, sorted by start.
  var rows = D.rows.map(function (def) { return { def: def, host: [], ops: [], syncs: [], holds: [], gaps: [], maxDur: 0, y: 0, h: ROW_H[def.kind] || 28, drawn: 0 }; });
  function addTo(list, field) {
    (list || []).forEach(function (s) {
      var r = rows[s[0]];
      if (!r) { return; }
      r[field].push(s);
      var d = field === 'gaps' ? s[2] - s[1] : s[2];
      if (d > r.maxDur) { r.maxDur = d; }
    });
  }
  addTo(D.host, 'host'); addTo(D.ops, 'ops'); addTo(D.syncs, 'syncs'); addTo(D.holds, 'holds');
  (D.gaps || []).forEach(function (g) { if (rows[g[0]]) { rows[g[0]].gaps.push(g); } });
  rows.forEach(function (r) {
    ['host', 'ops', 'syncs', 'holds'].forEach(function (f) { r[f].sort(function (a, b) { return a[1] - b[1]; }); });
  });
  var hostBySeq = new Map(), opById = new Map();
  (D.host || []).forEach(function (s) { hostBySeq.set(D.rows[s[0]].pid + ':' + s[H.seq], s); });
  (D.ops || []).forEach(function (s) { opById.set(D.rows[s[0]].pid + ':' + s[O.id], s); });

  // Aggregated occupancy, decoded.
  var agg = null;
  if (D.agg) {
    agg = { width: D.agg.width, start: D.agg.start, rows: new Map() };
    D.agg.rows.forEach(function (ar) {
      var cats = {};
      Object.keys(ar.cats).forEach(function (k) {
        var bin = atob(ar.cats[k]), a = new Uint8Array(bin.length);
        for (var i = 0; i < bin.length; i++) { a[i] = bin.charCodeAt(i); }
        cats[k] = a;
      });
      agg.rows.set(ar.row, cats);
    });
  }

  // Layout: a header per group, then its rows.
  var labels = document.getElementById('tl-labels');
  var layout = [], y = 0;
  D.groups.forEach(function (g) {
    var el = document.createElement('div');
    el.className = 'group'; el.textContent = g.label; el.style.height = ROW_H.group + 'px';
    el.title = g.label;
    labels.appendChild(el);
    layout.push({ group: g, y: y, h: ROW_H.group });
    y += ROW_H.group;
    g.rows.forEach(function (i) {
      var r = rows[i];
      r.y = y;
      var el2 = document.createElement('div');
      el2.className = 'row ' + r.def.kind;
      el2.textContent = r.def.label;
      el2.title = r.def.label + (r.def.sub ? ' — ' + r.def.sub : '');
      el2.style.height = r.h + 'px';
      el2.dataset.row = i;
      r.label = el2;
      labels.appendChild(el2);
      y += r.h;
    });
  });
  var totalH = Math.max(y, 40) + 24; // + the time axis
  var AXIS = 24;

  var holder = document.getElementById('tl-canvas');
  var canvas = document.createElement('canvas');
  holder.appendChild(canvas);
  labels.style.paddingTop = AXIS + 'px';
  var tip = document.getElementById('tl-tip');
  var ctx = canvas.getContext('2d');
  var dpr = window.devicePixelRatio || 1;
  var W = 800;

  // The view: [v0, v1] ns after the page's origin.
  var full0 = D.from, full1 = Math.max(D.to, D.from + 1000);
  var v0 = full0, v1 = full1;
  var selected = null;
  var showDeps = true, showQueue = true;

  function x(t) { return (t - v0) / (v1 - v0) * W; }
  function tAt(px) { return v0 + px / W * (v1 - v0); }

  function resize() {
    W = Math.max(200, holder.clientWidth);
    canvas.width = Math.round(W * dpr);
    canvas.height = Math.round(totalH * dpr);
    canvas.style.width = W + 'px';
    canvas.style.height = totalH + 'px';
    draw();
  }

  var hatch = (function () {
    var c = document.createElement('canvas');
    c.width = c.height = 6;
    var g = c.getContext('2d');
    g.strokeStyle = 'rgba(255,255,255,0.75)';
    g.lineWidth = 1.6;
    g.beginPath(); g.moveTo(0, 6); g.lineTo(6, 0); g.moveTo(-1, 1); g.lineTo(1, -1); g.moveTo(5, 7); g.lineTo(7, 5); g.stroke();
    return ctx.createPattern(c, 'repeat');
  })();
  var heldHatch = (function () {
    var c = document.createElement('canvas');
    c.width = c.height = 6;
    var g = c.getContext('2d');
    g.fillStyle = '#ececec'; g.fillRect(0, 0, 6, 6);
    g.strokeStyle = '#b5b5b5'; g.lineWidth = 1;
    g.beginPath(); g.moveTo(0, 6); g.lineTo(6, 0); g.stroke();
    return ctx.createPattern(c, 'repeat');
  })();

  function hash(s) { var h = 0; for (var i = 0; i < s.length; i++) { h = (h * 31 + s.charCodeAt(i)) | 0; } return Math.abs(h); }
  function opColor(s) {
    var kind = S[s[O.kind]], name = S[s[O.name]];
    if (kind === 'kernel' || kind === 'graph') { var h = hash(name); return 'hsl(' + (200 + h % 50) + ',50%,' + (40 + (h >> 6) % 20) + '%)'; }
    if (kind === 'memcpy') { return name.indexOf('HtoD') >= 0 ? '#59a14f' : name.indexOf('DtoH') >= 0 ? '#f28e2b' : '#76b7b2'; }
    if (kind === 'memset') { return '#b07aa1'; }
    if (kind === 'collective') { return '#d37295'; }
    return '#a0a4ab';
  }

  // First slice that may overlap t (slices sorted by start, none longer than maxDur).
  function firstFrom(list, t, maxDur) {
    var lo = 0, hi = list.length, key = t - maxDur;
    while (lo < hi) { var m = (lo + hi) >> 1; if (list[m][1] < key) { lo = m + 1; } else { hi = m; } }
    return lo;
  }

  function fmtDur(ns) {
    ns = Math.max(0, ns);
    if (ns < 1e3) { return Math.round(ns) + ' ns'; }
    if (ns < 1e6) { return (ns / 1e3).toFixed(1) + ' µs'; }
    if (ns < 1e9) { return (ns / 1e6).toFixed(2) + ' ms'; }
    return (ns / 1e9).toFixed(3) + ' s';
  }
  function fmtAt(t) { return '+' + fmtDur(t); }
  function fmtBytes(n) {
    if (n < 1024) { return n + ' B'; }
    var u = ['KiB', 'MiB', 'GiB', 'TiB'], i = -1;
    do { n /= 1024; i++; } while (n >= 1024 && i < u.length - 1);
    return n.toFixed(1) + ' ' + u[i];
  }
  function fmtValue(v, unit) {
    if (unit === 'bytes') { return fmtBytes(v); }
    if (unit === 'pct') { return v.toFixed(0) + '%'; }
    if (unit === 'per_s') { return v >= 1e6 ? (v / 1e6).toFixed(2) + ' M/s' : v >= 1e3 ? (v / 1e3).toFixed(1) + ' k/s' : v.toFixed(0) + '/s'; }
    if (unit === 'w') { return v.toFixed(0) + ' W'; }
    if (unit === 'mhz') { return v.toFixed(0) + ' MHz'; }
    return (Math.round(v * 100) / 100) + '';
  }
  function esc(s) { return String(s).replace(/[&<>"]/g, function (c) { return { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;' }[c]; }); }

  function drawAxis() {
    ctx.fillStyle = '#f6f7f9'; ctx.fillRect(0, 0, W, AXIS);
    ctx.strokeStyle = '#d9dde5'; ctx.beginPath(); ctx.moveTo(0, AXIS - 0.5); ctx.lineTo(W, AXIS - 0.5); ctx.stroke();
    // The smallest 1, 2 or 5 × 10^k ns that leaves 110 px between ticks.
    var span = v1 - v0, target = span / Math.max(1, W / 110), step = 1;
    while (step * 10 <= target) { step *= 10; }
    if (step < target) { step *= step * 2 >= target ? 2 : step * 5 >= target ? 5 : 10; }
    ctx.fillStyle = '#5b6475'; ctx.font = '11px system-ui, sans-serif'; ctx.textBaseline = 'middle';
    for (var t = Math.ceil(v0 / step) * step; t <= v1; t += step) {
      var px = Math.round(x(t)) + 0.5;
      ctx.strokeStyle = '#d9dde5'; ctx.beginPath(); ctx.moveTo(px, AXIS - 6); ctx.lineTo(px, totalH); ctx.stroke();
      ctx.fillText(fmtAt(t), px + 3, AXIS / 2);
    }
  }

  // A row's occupancy per bucket, outside the detail window: each
  // category's share of the bucket, stacked.
  function drawAgg(r, ri, names, colors, y0, h) {
    if (!agg || !agg.rows.has(ri)) { return; }
    var occ = agg.rows.get(ri), w = agg.width;
    var b0 = Math.max(0, Math.floor((v0 - agg.start) / w)), b1 = Math.ceil((v1 - agg.start) / w);
    for (var b = b0; b <= b1; b++) {
      var t0 = agg.start + b * w, t1 = t0 + w;
      if (t0 >= D.window.from && t1 <= D.window.to) { continue; } // drawn in detail
      var px0 = x(Math.max(t0, v0)), px1 = x(Math.min(t1, v1)), acc = 0;
      for (var ci = 0; ci < names.length; ci++) {
        var a = occ[names[ci]];
        if (!a || b >= a.length || !a[b]) { continue; }
        var bh = Math.min(h - acc, Math.max(1, a[b] / 255 * h));
        if (bh <= 0) { break; }
        ctx.fillStyle = colors[ci];
        ctx.fillRect(px0, y0 + h - acc - bh, Math.max(1, px1 - px0), bh);
        acc += bh;
        r.drawn++;
      }
    }
  }

  // A series scaled to the row: a step function drawn as flat segments
  // (none where it is zero), or a line through its samples.
  // Returns the series' peak.
  function drawSeries(s, y0, h, color, fill) {
    var pts = s.points;
    if (!pts || !pts.length) { return 0; }
    var peak = 0, j;
    for (j = 0; j < pts.length; j++) { if (pts[j][1] > peak) { peak = pts[j][1]; } }
    var mx = s.max || peak || 1;
    function py(v) { return y0 + h - Math.min(1, v / mx) * (h - 2); }
    ctx.strokeStyle = color; ctx.lineWidth = 1.2;
    if (s.kind === 'step') {
      var endT = Math.max(D.to, pts[pts.length - 1][0]);
      for (j = 0; j < pts.length; j++) {
        var v = pts[j][1];
        if (v <= 0) { continue; }
        var a = x(pts[j][0]), b = x(j + 1 < pts.length ? pts[j + 1][0] : endT);
        if (b < 0 || a > W) { continue; }
        var yv = py(v);
        if (fill) { ctx.fillStyle = fill; ctx.fillRect(a, yv, Math.max(1, b - a), y0 + h - yv); }
        ctx.beginPath(); ctx.moveTo(a, y0 + h); ctx.lineTo(a, yv); ctx.lineTo(b, yv);
        if (j + 1 >= pts.length || pts[j + 1][1] <= 0) { ctx.lineTo(b, y0 + h); }
        ctx.stroke();
      }
    } else {
      ctx.beginPath();
      for (j = 0; j < pts.length; j++) { var px = x(pts[j][0]); if (j === 0) { ctx.moveTo(px, py(pts[j][1])); } else { ctx.lineTo(px, py(pts[j][1])); } }
      ctx.stroke();
    }
    ctx.lineWidth = 1;
    return peak;
  }

  function drawRow(i) {
    var r = rows[i], y0 = AXIS + r.y, h = r.h, kind = r.def.kind;
    r.drawn = 0;
    if (y0 > totalH) { return; }
    ctx.fillStyle = i % 2 ? '#fcfcfd' : '#ffffff';
    ctx.fillRect(0, y0, W, h);
    ctx.strokeStyle = '#eceef2'; ctx.beginPath(); ctx.moveTo(0, y0 + h - 0.5); ctx.lineTo(W, y0 + h - 0.5); ctx.stroke();
    if (kind === 'counter') {
      (r.def.series || []).forEach(function (si, k) {
        var s = D.series[si], peak = drawSeries(s, y0 + 3, h - 6, SERIES_COLORS[k % SERIES_COLORS.length], null);
        if (s.points.length) { r.drawn += s.points.length; }
        var text = s.label + ' (peak ' + fmtValue(peak || 0, s.unit) + (s.max ? ' of ' + fmtValue(s.max, s.unit) : '') + ')';
        ctx.font = '10px system-ui, sans-serif'; ctx.textBaseline = 'top';
        ctx.fillStyle = 'rgba(255,255,255,0.85)'; ctx.fillRect(2, y0 + 1 + k * 11, ctx.measureText(text).width + 4, 11);
        ctx.fillStyle = SERIES_COLORS[k % SERIES_COLORS.length];
        ctx.fillText(text, 4, y0 + 2 + k * 11);
      });
      return;
    }
    if (kind === 'gpu') {
      if (showQueue) { (r.def.series || []).forEach(function (si) { drawSeries(D.series[si], y0 + h * 0.45, h * 0.55 - 1, 'rgba(242,142,43,0.9)', 'rgba(242,142,43,0.18)'); }); }
      drawAgg(r, i, GPU_CATS, GPU_CATS.map(function (c) { return GPU_COLORS[c]; }), y0 + 2, h - 4);
      drawOps(r, y0 + 3, h - 8);
      r.gaps.forEach(function (g) {
        var a = x(g[1]), b = x(g[2]);
        if (b < 0 || a > W || b - a < 2) { return; }
        ctx.strokeStyle = 'rgba(192,57,43,0.55)'; ctx.setLineDash([3, 2]);
        ctx.beginPath(); ctx.moveTo(a, y0 + h - 2.5); ctx.lineTo(b, y0 + h - 2.5); ctx.stroke(); ctx.setLineDash([]);
      });
      return;
    }
    drawAgg(r, i, HOST_CATS, HOST_COLORS, y0 + 2, h - 4);
    drawHost(r, y0 + 2, h - 13, y0 + h - 10, 8);
  }

  // Slices narrower than a pixel are gathered per pixel column and drawn
  // as one bar each, so that zoomed out views stay fast and nothing vanishes.
  // A column holding any bounded op is hatched like one.
  function Columns() { this.cols = new Map(); this.hatched = new Set(); }
  Columns.prototype.add = function (px, color, hatched) {
    var k = Math.floor(px);
    if (!this.cols.has(k)) { this.cols.set(k, color); }
    if (hatched) { this.hatched.add(k); }
  };
  Columns.prototype.draw = function (y0, h) {
    var hs = this.hatched;
    this.cols.forEach(function (c, k) {
      ctx.fillStyle = c; ctx.fillRect(k, y0, 1, h);
      if (hs.has(k)) { ctx.fillStyle = hatch; ctx.fillRect(k, y0, 1, h); }
    });
  };

  function drawHost(r, y0, h, sy, sh) {
    var cols = new Columns();
    var lst = r.host, i, s, a, b;
    for (i = firstFrom(lst, v0, r.maxDur); i < lst.length && lst[i][1] <= v1; i++) {
      s = lst[i]; a = x(s[1]); b = x(s[1] + s[2]);
      if (b < 0) { continue; }
      r.drawn++;
      var color = HOST_COLORS[s[H.cat]] || '#a0a4ab';
      if (b - a < 1) { cols.add(a, color); continue; }
      ctx.fillStyle = color; ctx.fillRect(a, y0, b - a, h);
      if (selected && selected.type === 'host' && selected.s === s) { ctx.strokeStyle = '#000'; ctx.lineWidth = 2; ctx.strokeRect(a, y0, b - a, h); ctx.lineWidth = 1; }
      if (b - a > 40) { label(S[s[H.name]], a, b, y0, h, '#fff'); }
    }
    cols.draw(y0, h);
    // Held by cudatap, drawn over the call that contains it.
    lst = r.holds;
    for (i = firstFrom(lst, v0, r.maxDur); i < lst.length && lst[i][1] <= v1; i++) {
      s = lst[i]; a = x(s[1]); b = x(s[1] + s[2]);
      if (b < 0) { continue; }
      ctx.fillStyle = heldHatch; ctx.fillRect(a, y0, Math.max(1, b - a), h);
      if (b - a > 120) { label('held by cudatap (hooking a library)', a, b, y0, h, '#555'); }
      r.drawn++;
    }
    cols = new Columns();
    lst = r.syncs;
    for (i = firstFrom(lst, v0, r.maxDur); i < lst.length && lst[i][1] <= v1; i++) {
      s = lst[i]; a = x(s[1]); b = x(s[1] + s[2]);
      if (b < 0) { continue; }
      r.drawn++;
      if (b - a < 1) { cols.add(a, '#c0392b'); continue; }
      ctx.fillStyle = '#c0392b'; ctx.fillRect(a, sy, b - a, sh);
      if (b - a > 60) { label('sync: ' + S[s[Y.kind]], a, b, sy - 1, sh + 2, '#fff', 9); }
    }
    cols.draw(sy, sh);
  }

  function label(text, a, b, y0, h, color, size) {
    var left = Math.max(a, 0) + 3, width = Math.min(b, W) - left - 3;
    if (width < 20) { return; }
    ctx.save(); ctx.beginPath(); ctx.rect(left, y0, width, h); ctx.clip();
    ctx.fillStyle = color; ctx.font = (size || 11) + 'px system-ui, sans-serif'; ctx.textBaseline = 'middle';
    ctx.fillText(text, left, y0 + h / 2 + 0.5);
    ctx.restore();
  }

  function drawOps(r, y0, h) {
    var cols = new Columns(), lst = r.ops;
    for (var i = firstFrom(lst, v0, r.maxDur); i < lst.length && lst[i][1] <= v1; i++) {
      var s = lst[i], a = x(s[1]), b = x(s[1] + s[2]);
      if (b < 0) { continue; }
      r.drawn++;
      var color = opColor(s), timing = s[O.timing];
      if (timing === 2) {
        // No synchronization proved it complete: only where it was enqueued.
        ctx.strokeStyle = color; ctx.setLineDash([2, 2]);
        ctx.strokeRect(a + 0.5, y0 + 0.5, Math.max(2, b - a) - 1, h - 1); ctx.setLineDash([]);
        continue;
      }
      if (b - a < 1) { cols.add(a, color, timing === 1); continue; }
      ctx.fillStyle = color; ctx.fillRect(a, y0, b - a, h);
      if (timing === 1) { ctx.fillStyle = hatch; ctx.fillRect(a, y0, b - a, h); }
      if (selected && selected.type === 'op' && selected.s === s) { ctx.strokeStyle = '#000'; ctx.lineWidth = 2; ctx.strokeRect(a, y0, b - a, h); ctx.lineWidth = 1; }
      if (b - a > 40) { label(S[s[O.name]], a, b, y0, h, '#fff'); }
    }
    cols.draw(y0, h);
  }

  function arrow(x0, y0, x1, y1, color) {
    ctx.strokeStyle = color; ctx.fillStyle = color; ctx.lineWidth = 1.2;
    ctx.beginPath(); ctx.moveTo(x0, y0);
    var mx = (x0 + x1) / 2;
    ctx.bezierCurveTo(mx, y0, mx, y1, x1, y1); ctx.stroke();
    var ang = Math.atan2(y1 - y0, x1 - mx);
    ctx.beginPath(); ctx.moveTo(x1, y1);
    ctx.lineTo(x1 - 6 * Math.cos(ang - 0.4), y1 - 6 * Math.sin(ang - 0.4));
    ctx.lineTo(x1 - 6 * Math.cos(ang + 0.4), y1 - 6 * Math.sin(ang + 0.4));
    ctx.closePath(); ctx.fill(); ctx.lineWidth = 1;
  }
  function rowMid(i) { var r = rows[i]; return AXIS + r.y + r.h / 2; }

  function drawDeps() {
    var n = 0;
    rows.forEach(function (r, ri) {
      if (r.def.kind !== 'gpu') { return; }
      var lst = r.ops;
      for (var i = firstFrom(lst, v0, r.maxDur); i < lst.length && lst[i][1] <= v1 && n < 2000; i++) {
        var s = lst[i];
        if (s[O.after] < 0 || s[O.afterRow] < 0) { continue; }
        var dep = opById.get(r.def.pid + ':' + s[O.after]);
        var from = dep ? dep[1] + dep[2] : s[O.afterStart];
        arrow(x(from), rowMid(s[O.afterRow]), x(s[1]), rowMid(ri), 'rgba(90,90,140,0.7)');
        n++;
      }
    });
  }

  function drawSelection() {
    if (!selected) { return; }
    var s = selected.s, pid = D.rows[s[0]].pid;
    if (selected.type === 'op') {
      var call = hostBySeq.get(pid + ':' + s[O.call]);
      if (call) { arrow(x(call[1]), rowMid(call[0]), x(s[1]), rowMid(s[0]), '#000'); }
    } else if (selected.type === 'host' && s[H.seq] >= 0) {
      rows.forEach(function (r) {
        if (r.def.pid !== pid) { return; }
        r.ops.forEach(function (o) { if (o[O.call] === s[H.seq]) { arrow(x(s[1]), rowMid(s[0]), x(o[1]), rowMid(o[0]), '#000'); } });
      });
    }
  }

  function drawWindowShade() {
    if (D.window.complete) { return; }
    ctx.fillStyle = 'rgba(120,120,140,0.08)';
    var a = x(D.window.from), b = x(D.window.to);
    if (a > 0) { ctx.fillRect(0, AXIS, Math.min(a, W), totalH - AXIS); }
    if (b < W) { ctx.fillRect(Math.max(b, 0), AXIS, W - Math.max(b, 0), totalH - AXIS); }
    ctx.strokeStyle = 'rgba(47,111,159,0.8)'; ctx.setLineDash([4, 3]);
    [a, b].forEach(function (px) { if (px >= 0 && px <= W) { ctx.beginPath(); ctx.moveTo(px, AXIS); ctx.lineTo(px, totalH); ctx.stroke(); } });
    ctx.setLineDash([]);
  }

  function draw() {
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, W, totalH);
    layout.forEach(function (l) { ctx.fillStyle = '#e9ecf1'; ctx.fillRect(0, AXIS + l.y, W, l.h); });
    rows.forEach(function (r, i) { drawRow(i); });
    drawWindowShade();
    drawAxis();
    if (showDeps) { drawDeps(); }
    drawSelection();
    rows.forEach(function (r) { if (r.label) { r.label.dataset.drawn = r.drawn; } });
    var vr = document.getElementById('tl-range');
    if (vr) { vr.textContent = fmtAt(v0) + ' to ' + fmtAt(v1) + ' (' + fmtDur(v1 - v0) + ' shown)'; }
  }

  // Interaction: wheel zooms around the pointer (shift+wheel pans), drag
  // pans, double click fits, keys w/s zoom and a/d pan.
  function setView(a, b) {
    var minSpan = 100;
    if (b - a < minSpan) { var m = (a + b) / 2; a = m - minSpan / 2; b = m + minSpan / 2; }
    var pad = (full1 - full0) * 0.05;
    if (a < full0 - pad) { b += full0 - pad - a; a = full0 - pad; }
    if (b > full1 + pad) { a -= b - full1 - pad; b = full1 + pad; }
    v0 = Math.max(a, full0 - pad); v1 = b;
    draw();
  }
  function zoom(f, px) { var t = tAt(px); setView(t - (t - v0) * f, t + (v1 - t) * f); }
  function pan(dx) { var dt = dx / W * (v1 - v0); setView(v0 + dt, v1 + dt); }
  canvas.addEventListener('wheel', function (e) {
    e.preventDefault();
    if (e.shiftKey || Math.abs(e.deltaX) > Math.abs(e.deltaY)) { pan(e.deltaX || e.deltaY); return; }
    zoom(Math.pow(1.0015, e.deltaY), e.offsetX);
  }, { passive: false });
  var drag = null;
  canvas.addEventListener('mousedown', function (e) { drag = { x: e.clientX, v0: v0, v1: v1, moved: false }; canvas.classList.add('dragging'); });
  window.addEventListener('mouseup', function () { canvas.classList.remove('dragging'); setTimeout(function () { drag = null; }, 0); });
  window.addEventListener('mousemove', function (e) {
    if (!drag || !(e.buttons & 1)) { return; }
    var dx = e.clientX - drag.x;
    if (Math.abs(dx) > 2) { drag.moved = true; }
    var dt = dx / W * (drag.v1 - drag.v0);
    setView(drag.v0 - dt, drag.v1 - dt);
  });
  canvas.addEventListener('dblclick', function () { setView(full0, full1); });
  document.addEventListener('keydown', function (e) {
    if (e.target && /INPUT|TEXTAREA|SELECT/.test(e.target.tagName)) { return; }
    var k = e.key.toLowerCase();
    if (k === 'w') { zoom(0.8, W / 2); } else if (k === 's') { zoom(1.25, W / 2); } else if (k === 'a') { pan(-W / 8); } else if (k === 'd') { pan(W / 8); }
  });

  function rowAt(py) {
    for (var i = 0; i < rows.length; i++) { var r = rows[i]; if (py >= AXIS + r.y && py < AXIS + r.y + r.h) { return i; } }
    return -1;
  }
  function hit(list, t, maxDur, slop) {
    var best = null;
    for (var i = firstFrom(list, t - slop, maxDur); i < list.length && list[i][1] <= t + slop; i++) {
      var s = list[i], d = s[2];
      if (t >= s[1] - slop && t <= s[1] + d + slop) { best = s; }
    }
    return best;
  }
  function find(px, py) {
    var i = rowAt(py);
    if (i < 0) { return null; }
    var r = rows[i], t = tAt(px), slop = 3 / W * (v1 - v0), yIn = py - AXIS - r.y;
    if (r.def.kind === 'gpu') { var o = hit(r.ops, t, r.maxDur, slop); return o ? { type: 'op', s: o } : null; }
    if (r.def.kind === 'host') {
      if (yIn > r.h - 12) { var y = hit(r.syncs, t, r.maxDur, slop); if (y) { return { type: 'sync', s: y }; } }
      var c = hit(r.host, t, r.maxDur, slop);
      if (c) { return { type: 'host', s: c }; }
      var hd = hit(r.holds, t, r.maxDur, slop);
      return hd ? { type: 'hold', s: hd } : null;
    }
    return { type: 'counter', row: i, t: t };
  }
  function describe(f) {
    var s = f.s;
    if (f.type === 'op') {
      var timing = s[O.timing], out = '<b>' + esc(S[s[O.name]]) + '</b> <span class="k">(' + esc(S[s[O.kind]]) + ', stream ' + s[O.stream] + ', GPU ' + (s[O.device] < 0 ? '?' : s[O.device]) + ')</span><br>';
      if (timing === 0) { out += 'measured: ' + fmtAt(s[1]) + ', ' + fmtDur(s[2]); }
      else if (timing === 1) { out += 'not measured: ran within ' + fmtAt(s[O.enq]) + ' (enqueued) – ' + fmtAt(s[O.proven]) + ' (proven complete)<br><span class="k">drawn where the model laid it out: ' + fmtAt(s[1]) + ', ' + fmtDur(s[2]) + '</span>'; }
      else { out += 'enqueued at ' + fmtAt(s[O.enq]) + '; no synchronization proved it complete: drawn with no length'; }
      if (s[O.bytes]) { out += '<br>' + fmtBytes(s[O.bytes]); }
      if (s[O.shape] >= 0) { out += '<br><span class="k">' + esc(S[s[O.shape]]) + '</span>'; }
      if (s[O.after] >= 0) { out += '<br><span class="k">waits for an event recorded on another stream (arrow)</span>'; }
      return out + '<br><span class="k">click: show the call that enqueued it</span>';
    }
    if (f.type === 'host') {
      var o2 = '<b>' + esc(S[s[H.name]]) + '</b> <span class="k">(thread ' + s[H.tid] + ')</span><br>' + fmtAt(s[1]) + ', ' + (s[2] ? fmtDur(s[2]) : 'entry only (no duration)');
      if (s[H.hold]) { o2 += '<br><span class="k">of which held by cudatap while it hooked a library: ' + fmtDur(s[H.hold]) + '</span>'; }
      if (s[H.kernel] >= 0) { o2 += '<br>kernel ' + esc(S[s[H.kernel]]); }
      if (s[H.stream] >= 0) { o2 += '<br>stream ' + s[H.stream]; }
      if (s[H.bytes]) { o2 += ', ' + fmtBytes(s[H.bytes]) + (s[H.flags] & 1 ? ' (pageable)' : ''); }
      if (s[H.flags] & 2) { o2 += '<br>captured into a graph'; }
      if (S[s[H.sync]]) { o2 += '<br><b style="color:#c0392b">' + esc(S[s[H.sync]]) + '</b>' + (s[H.blocked] ? ': blocked ' + fmtDur(s[H.blocked]) : ''); }
      return o2;
    }
    if (f.type === 'sync') {
      return '<b style="color:#c0392b">' + esc(S[s[Y.kind]]) + '</b> in ' + esc(S[s[Y.api]]) + '<br>blocked ' + fmtDur(s[Y.blocked]) + ' at ' + fmtAt(s[1]) +
        '<br>' + (s[Y.stream] >= 0 ? 'stream ' + s[Y.stream] : 'every stream') + ', ' + s[Y.queued] + ' GPU ops queued' + (s[Y.polls] ? ', ' + s[Y.polls] + ' polls' : '') +
        '<br><span class="fix">fix: ' + esc(S[s[Y.hint]]) + '</span>';
    }
    if (f.type === 'hold') { return '<b>held by cudatap</b> while it hooked a library: ' + fmtDur(s[2]) + '<br><span class="k">cudatap\'s time, not CUDA\'s</span>'; }
    if (f.type === 'counter') {
      var r = rows[f.row], lines = [];
      (r.def.series || []).forEach(function (si) {
        var ser = D.series[si], v = null;
        ser.points.forEach(function (p) { if (p[0] <= f.t) { v = p[1]; } });
        if (v !== null) { lines.push(esc(ser.label) + ': ' + fmtValue(v, ser.unit)); }
      });
      return lines.length ? fmtAt(f.t) + '<br>' + lines.join('<br>') : null;
    }
    return null;
  }
  canvas.addEventListener('mousemove', function (e) {
    if (drag && drag.moved) { tip.style.display = 'none'; return; }
    var f = find(e.offsetX, e.offsetY), html = f ? describe(f) : null;
    if (!html) { tip.style.display = 'none'; return; }
    tip.innerHTML = html;
    tip.style.display = 'block';
    var left = e.offsetX + 14;
    if (left + 380 > W) { left = Math.max(0, e.offsetX - 390); }
    tip.style.left = left + 'px'; tip.style.top = (e.offsetY + 14) + 'px';
  });
  canvas.addEventListener('mouseleave', function () { tip.style.display = 'none'; });
  canvas.addEventListener('click', function (e) {
    if (drag && drag.moved) { return; }
    var f = find(e.offsetX, e.offsetY);
    selected = f && (f.type === 'op' || f.type === 'host') ? f : null;
    draw();
  });

  function bind(id, fn) { var el = document.getElementById(id); if (el) { el.addEventListener('click', fn); } }
  bind('tl-fit', function () { setView(full0, full1); });
  bind('tl-window', function () { setView(D.window.from, D.window.to); });
  bind('tl-in', function () { zoom(0.5, W / 2); });
  bind('tl-out', function () { zoom(2, W / 2); });
  var deps = document.getElementById('tl-deps');
  if (deps) { deps.addEventListener('change', function () { showDeps = deps.checked; draw(); }); }
  var queue = document.getElementById('tl-queue');
  if (queue) { queue.addEventListener('change', function () { showQueue = queue.checked; draw(); }); }
  // Links elsewhere in the page that show a stretch of the timeline.
  Array.prototype.forEach.call(document.querySelectorAll('a.zoom'), function (a) {
    a.addEventListener('click', function (e) {
      e.preventDefault();
      var from = Number(a.dataset.from), to = Number(a.dataset.to), pad = Math.max((to - from) * 0.5, 1000);
      setView(from - pad, to + pad);
      document.getElementById('timeline').scrollIntoView();
    });
  });
  window.addEventListener('resize', resize);

  // The first view: the detail window when part of the recording is
  // aggregated, else the span of the GPU work.
  // (#fit in the address: the whole recording.)
  if (location.hash === '#fit') { v0 = full0; v1 = full1; }
  else if (!D.window.complete) { v0 = D.window.from; v1 = Math.max(D.window.to, D.window.from + 1000); }
  else if (D.view) { var pad = (D.view[1] - D.view[0]) * 0.03; v0 = Math.max(full0, D.view[0] - pad); v1 = Math.min(full1, D.view[1] + pad); }
  resize();
  document.body.dataset.render = 'ok';
  document.body.dataset.rows = rows.length;
})();
