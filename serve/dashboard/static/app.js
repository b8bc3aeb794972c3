// The vram dashboard. No framework, no build step: this file is served as
// written. It reads GET api/v1/state once, then follows the "state", "alert"
// and "action" events of GET events; history comes from api/v1/history on
// demand. All URLs are relative to the page, so the dashboard works behind a
// path prefix. Every field of the API's JSON is read through the small
// accessors below, so a missing or mistyped field shows as "n/a", never as an
// exception. serve/dashboard/doc.go describes the design.
(function () {
  'use strict';

  var KiB = 1024, MiB = 1024 * KiB, GiB = 1024 * MiB;
  var LIVE_WINDOW_MS = 10 * 60 * 1000;   // the GPU cards' live charts
  var HIST_POINTS = 400;                 // buckets asked for per history request
  var ROW_LIMIT = 200;                   // process rows shown until "show all"
  var MIN_ZOOM_MS = 60 * 1000;           // narrowest zoom
  var RETRY_MIN_MS = 1000, RETRY_MAX_MS = 30000;
  // Range buttons: label -> [seconds, the "from" the API is asked for].
  var RANGES = {
    '15m': [900, '-15m'], '1h': [3600, '-1h'], '6h': [21600, '-6h'],
    '24h': [86400, '-24h'], '7d': [604800, '-168h']
  };
  var SVGNS = 'http://www.w3.org/2000/svg';
  var TOKEN_KEY = 'vram.token';

  // ---- accessors that never throw ------------------------------------------

  function arr(x) { return Array.isArray(x) ? x : []; }
  function num(x, d) { return (typeof x === 'number' && isFinite(x)) ? x : d; }
  function str(x) { return typeof x === 'string' ? x : (x == null ? '' : String(x)); }
  function obj(x) { return (x && typeof x === 'object') ? x : {}; }
  function ms(x) { var t = Date.parse(str(x)); return isNaN(t) ? null : t; }

  // ---- formatting ------------------------------------------------------------

  // bytes writes a size as vram's other commands do (units.FormatBytes):
  // the unit picked by size, two decimals above bytes, and a value that
  // rounds to 1024.00 of a unit written as 1.00 of the next.
  var UNITS = [' KiB', ' MiB', ' GiB', ' TiB', ' PiB', ' EiB'];
  function bytes(b) {
    b = num(b, null);
    if (b === null || b < 0) return 'n/a';
    b = Math.floor(b); // as a Go uint64 conversion: the history's means are fractional
    if (b < 1024) return b + ' B';
    var f = b / 1024, i = 0;
    while (f >= 1024 && i < UNITS.length - 1) { f /= 1024; i++; }
    for (;; i++) {
      var s = fixed2(f);
      if (i === UNITS.length - 1 || s !== '1024.00') return s + UNITS[i];
      f /= 1024;
    }
  }
  // fixed2 is Go's %.2f of x >= 0. toFixed rounds as Go does except on an
  // exact tie, which it rounds up and Go to even; b / 1024^k is exact, so a
  // tie is a multiple of 1/8 that is odd (x.125, x.375, x.625, x.875).
  function fixed2(x) {
    var c = x * 100; // exact at a tie
    if (c - Math.floor(c) === 0.5 && x * 8 === Math.floor(x * 8)) {
      var n = Math.floor(c);
      if (n % 2 === 1) n++;
      return Math.floor(n / 100) + '.' + pad2(n % 100);
    }
    return x.toFixed(2);
  }
  function pad2(n) { return (n < 10 ? '0' : '') + n; }
  function clock(t, seconds) {
    var d = new Date(t);
    var s = pad2(d.getHours()) + ':' + pad2(d.getMinutes());
    return seconds ? s + ':' + pad2(d.getSeconds()) : s;
  }
  function dayClock(t) {
    var d = new Date(t);
    return pad2(d.getMonth() + 1) + '-' + pad2(d.getDate()) + ' ' + clock(t);
  }
  function ago(t) {
    var s = Math.max(0, Math.round((Date.now() - t) / 1000));
    if (s < 60) return s + ' s ago';
    if (s < 3600) return Math.round(s / 60) + ' min ago';
    return Math.round(s / 3600) + ' h ago';
  }
  // growth is the leak detector's slope in MiB/min, or null while it has
  // no verdict (no leak field, or "insufficient": still warming up or not yet confirmed).
  function growth(p) {
    var l = p.leak;
    if (!l || typeof l !== 'object' || l.verdict === 'insufficient') return null;
    var slope = num(l.slope_bytes_per_second, null);
    return slope === null ? null : slope * 60 / MiB;
  }

  // ---- DOM helpers -------------------------------------------------------------

  function $(sel) { return document.querySelector(sel); }
  function el(tag, attrs) {
    var e = document.createElement(tag);
    setAttrs(e, attrs);
    for (var i = 2; i < arguments.length; i++) {
      if (arguments[i] != null) e.append(arguments[i]);
    }
    return e;
  }
  function svg(tag, attrs) {
    var e = document.createElementNS(SVGNS, tag);
    setAttrs(e, attrs);
    return e;
  }
  function setAttrs(e, attrs) {
    if (!attrs) return;
    Object.keys(attrs).forEach(function (k) {
      var v = attrs[k];
      if (v == null || v === false) return;
      if (k === 'class') e.setAttribute('class', v);
      else if (k === 'text') e.textContent = v;
      else e.setAttribute(k, v === true ? '' : String(v));
    });
  }
  function setText(e, t) { if (e.textContent !== t) e.textContent = t; }
  function clear(e) { while (e.firstChild) e.removeChild(e.firstChild); }
  // order puts nodes into parent in the given order, moving only those out
  // of place (so a row under the pointer is not re-inserted every second).
  // One pass over the children: O(n), where indexing parent.children after
  // each move would be O(n²).
  function order(parent, nodes) {
    var cur = parent.firstElementChild;
    for (var i = 0; i < nodes.length; i++) {
      if (nodes[i] === cur) cur = cur.nextElementSibling;
      else parent.insertBefore(nodes[i], cur);
    }
    while (cur) {
      var next = cur.nextElementSibling;
      parent.removeChild(cur);
      cur = next;
    }
  }

  // ---- state ---------------------------------------------------------------

  var S = {
    state: null,          // the latest State
    sampleMs: null,       // its time
    live: new Map(),      // GPU UUID -> [{t, used, total}], the cards' charts
    cards: new Map(),     // GPU UUID -> card
    rows: new Map(),      // process key -> row
    procs: new Map(),     // process key -> Process, for the buttons
    sort: { key: 'used', dir: -1 },
    filter: '',
    showAll: false,
    widthEpoch: 0,        // bumped on resize: cached chart widths are stale
    alertEvents: [],      // alerts seen on the stream since the last state
    actions: [],          // newest first
    es: null, retries: 0, retryAt: 0, retryTimer: 0, connected: false,
    hist: { gpu: '', proc: '', range: '1h', zoom: null, seq: 0, view: null, drag: null },
    signal: null          // {proc, sig} while the dialog is open
  };

  function procKey(p) { return str(p.gpu_uuid) + '|' + num(p.pid, 0) + '|' + str(p.start_time); }

  // ---- API -------------------------------------------------------------------

  function apiError(r, body) {
    var m = body && body.error && body.error.message;
    return m ? str(m) : (r.status + ' ' + r.statusText);
  }

  function getJSON(url) {
    return fetch(url, { headers: { Accept: 'application/json' }, cache: 'no-store' })
      .then(function (r) {
        return r.json().catch(function () { return null; }).then(function (body) {
          if (!r.ok) throw new Error(apiError(r, body));
          return obj(body);
        });
      });
  }

  function showBanner(msg) {
    var b = $('#banner');
    b.textContent = msg || '';
    b.hidden = !msg;
  }

  function loadState() {
    return getJSON('api/v1/state').then(function (s) {
      showBanner('');
      applyState(s);
    }, function (e) {
      showBanner('Could not read the state: ' + e.message);
    });
  }

  function loadActions() {
    return getJSON('api/v1/actions?from=-24h').then(function (body) {
      S.actions = arr(body.actions).slice().sort(function (a, b) {
        return (ms(b.time) || 0) - (ms(a.time) || 0);
      });
      renderActions();
    }, function (e) {
      showBanner('Could not read the actions: ' + e.message);
    });
  }

  // ---- live stream -------------------------------------------------------------

  function connect() {
    clearTimeout(S.retryTimer);
    var es = new EventSource('events');
    S.es = es;
    S.retryAt = 0; // trying now: no countdown
    setConn(S.retries ? 'reconnecting' : 'connecting');
    es.addEventListener('open', function () {
      if (S.es !== es) return;
      var again = S.retries > 0;
      S.retries = 0;
      S.connected = true;
      setConn('live');
      if (again) { loadState(); loadActions(); } // catch up on what was missed
    });
    es.addEventListener('state', function (e) {
      var s = parse(e.data);
      if (s) applyState(s);
    });
    es.addEventListener('alert', function (e) {
      var a = parse(e.data);
      if (!a) return;
      S.alertEvents.push(a);
      renderAlerts();
    });
    es.addEventListener('action', function (e) {
      var a = parse(e.data);
      if (a) addAction(a);
    });
    es.addEventListener('error', function () {
      // EventSource retries by itself at a fixed pace, and not at all after
      // some failures; close it and retry with backoff instead.
      es.close();
      if (S.es !== es) return;
      S.es = null;
      S.connected = false;
      var delay = Math.min(RETRY_MAX_MS, RETRY_MIN_MS * Math.pow(2, S.retries));
      delay = Math.round(delay * (0.8 + 0.4 * Math.random()));
      S.retries++;
      S.retryAt = Date.now() + delay;
      setConn('reconnecting');
      S.retryTimer = setTimeout(connect, delay);
    });
  }

  function parse(data) {
    try {
      var v = JSON.parse(data);
      return (v && typeof v === 'object') ? v : null;
    } catch (e) {
      return null;
    }
  }

  function setConn(what) {
    var c = $('#conn');
    c.className = 'conn ' + what;
    c.dataset.state = what;
    var t = what;
    if (what === 'reconnecting' && S.retryAt) {
      t = 'reconnecting in ' + Math.max(0, Math.ceil((S.retryAt - Date.now()) / 1000)) + ' s';
    }
    setText(c, t);
  }

  // tick refreshes what depends on the clock alone.
  function tick() {
    if (S.sampleMs !== null) {
      var ls = $('#last-sample');
      setText(ls, 'last sample ' + clock(S.sampleMs, true) + ' (' + ago(S.sampleMs) + ')');
      ls.classList.toggle('stale', Date.now() - S.sampleMs > 15000);
    }
    if (!S.connected && S.es === null) setConn('reconnecting');
  }

  // ---- state rendering ---------------------------------------------------------

  function applyState(s) {
    s = obj(s);
    S.state = s;
    S.sampleMs = ms(s.time);
    S.alertEvents = [];
    pushLive(s);
    renderHeader(s);
    renderGPUs(s);
    renderProcs(s);
    renderAlerts();
    renderHistoryChoices(s);
    tick();
    document.body.dataset.samples = String(num(Number(document.body.dataset.samples), 0) + 1);
  }

  function renderHeader(s) {
    var host = str(s.hostname) || 'unknown host';
    setText($('#host'), host);
    document.title = 'vram · ' + host;
    $('#simulated').hidden = !s.simulated;
    var w = arr(s.warnings), ul = $('#warnings');
    clear(ul);
    w.forEach(function (x) { ul.append(el('li', { text: str(x) })); });
    ul.hidden = w.length === 0;
  }

  function pushLive(s) {
    var t = S.sampleMs === null ? Date.now() : S.sampleMs;
    arr(s.devices).forEach(function (d) {
      d = obj(d);
      var id = str(d.gpu_uuid);
      if (!id) return;
      var buf = S.live.get(id);
      if (!buf) {
        buf = [];
        S.live.set(id, buf);
        // Seed the chart with the samples the state carries.
        var rec = arr(d.recent), step = num(d.recent_step_seconds, 0) * 1000;
        if (step > 0) {
          for (var i = 0; i < rec.length - 1; i++) {
            var v = num(rec[i], null);
            if (v !== null) buf.push({ t: t - (rec.length - 1 - i) * step, used: v });
          }
        }
      }
      var used = num(d.used_bytes, null);
      if (used !== null && (!buf.length || buf[buf.length - 1].t < t)) buf.push({ t: t, used: used });
      while (buf.length && buf[0].t < t - LIVE_WINDOW_MS) buf.shift();
    });
  }

  function makeCard(id) {
    var c = {};
    c.index = el('span', { class: 'gpu-index' });
    c.name = el('span', { class: 'gpu-name' });
    c.health = el('span', { class: 'health' });
    c.histBtn = el('button', { type: 'button', class: 'link hist-btn', text: 'history' });
    c.histBtn.addEventListener('click', function () { showHistory(id, ''); });
    c.uuid = el('span', { class: 'uuid', text: id });
    c.error = el('div', { class: 'health-error', hidden: true });
    c.segUsed = el('span', { class: 'seg used' });
    c.segUnattr = el('span', { class: 'seg unattr' });
    c.segReserved = el('span', { class: 'seg reserved' });
    c.bar = el('div', { class: 'membar' }, c.segUsed, c.segUnattr, c.segReserved);
    c.used = el('b', { class: 'mem-used' });
    c.reserved = el('b', { class: 'mem-reserved' });
    c.free = el('b', { class: 'mem-free' });
    c.total = el('b', { class: 'mem-total' });
    c.unattr = el('b', { class: 'mem-unattr' });
    c.util = el('b', { class: 'util' });
    c.utilFill = el('span', { class: 'util-fill' });
    c.nprocs = el('b', { class: 'nprocs' });
    c.chart = el('div', { class: 'live-chart' });
    c.root = el('div', { class: 'card', 'data-uuid': id },
      el('div', { class: 'card-head' }, c.index, c.name, c.health, el('span', { class: 'spacer' }), c.histBtn),
      el('div', { class: 'card-sub' }, c.uuid, el('span', { class: 'of' }, c.total, ' total')),
      c.error, c.bar,
      el('div', { class: 'legend' },
        el('span', null, el('i', { class: 'key used' }), 'used ', c.used),
        el('span', null, el('i', { class: 'key reserved' }), 'reserved ', c.reserved),
        el('span', null, el('i', { class: 'key free' }), 'free ', c.free)),
      el('div', { class: 'stats' },
        el('span', null, el('i', { class: 'key unattr' }), 'unattributed ', c.unattr),
        el('span', { class: 'util-box' }, 'utilization ', c.util, el('span', { class: 'util-bar' }, c.utilFill)),
        el('span', null, 'processes ', c.nprocs)),
      c.chart);
    return c;
  }

  function pct(part, total) { return total > 0 ? Math.max(0, Math.min(100, 100 * part / total)) : 0; }

  function renderGPUs(s) {
    var box = $('#gpus'), nodes = [], seen = new Set();
    var counts = new Map();
    arr(s.processes).forEach(function (p) {
      var g = str(obj(p).gpu_uuid);
      counts.set(g, (counts.get(g) || 0) + 1);
    });
    arr(s.devices).forEach(function (d, i) {
      d = obj(d);
      var id = str(d.gpu_uuid) || ('gpu-' + num(d.gpu_index, i));
      if (seen.has(id)) return;
      seen.add(id);
      var c = S.cards.get(id);
      if (!c) { c = makeCard(id); S.cards.set(id, c); }
      updateCard(c, d, counts.get(id) || 0);
      nodes.push(c.root);
    });
    S.cards.forEach(function (c, id) { if (!seen.has(id)) S.cards.delete(id); });
    if (!nodes.length) nodes.push(el('p', { class: 'empty', text: 'No GPUs in the last sample.' }));
    order(box, nodes);
    S.cards.forEach(function (c, id) { drawLive(c, id); });
  }

  function updateCard(c, d, nprocs) {
    var total = num(d.total_bytes, 0), used = num(d.used_bytes, 0), free = num(d.free_bytes, 0);
    var reservedKnown = d.reserved_known === true;
    var reserved = reservedKnown ? num(d.reserved_bytes, 0) : 0;
    var unattr = Math.min(num(d.unattributed_bytes, 0), used);
    setText(c.index, 'GPU ' + num(d.gpu_index, '?'));
    setText(c.name, str(d.name));
    var healthy = d.healthy !== false;
    setText(c.health, healthy ? 'healthy' : 'unhealthy');
    c.health.className = 'health ' + (healthy ? 'ok' : 'bad');
    c.root.classList.toggle('unhealthy', !healthy);
    c.error.hidden = healthy;
    setText(c.error, healthy ? '' : (str(d.error) || 'unhealthy, no error given'));
    c.segUsed.style.width = pct(used - unattr, total) + '%';
    c.segUnattr.style.width = pct(unattr, total) + '%';
    c.segReserved.style.width = pct(reserved, total) + '%';
    c.bar.title = bytes(used) + ' used (' + bytes(unattr) + ' unattributed), ' +
      (reservedKnown ? bytes(reserved) : 'n/a') + ' reserved, ' + bytes(free) + ' free of ' + bytes(total);
    setText(c.used, bytes(used));
    setText(c.reserved, reservedKnown ? bytes(reserved) : 'n/a');
    setText(c.free, bytes(free));
    setText(c.total, bytes(total));
    setText(c.unattr, bytes(unattr));
    c.unattr.classList.toggle('warn', unattr >= GiB);
    var util = num(d.util_percent, -1);
    setText(c.util, util < 0 ? 'n/a' : util + ' %');
    c.utilFill.style.width = (util < 0 ? 0 : Math.min(100, util)) + '%';
    setText(c.nprocs, String(nprocs));
    c.totalBytes = total;
  }

  // drawLive draws a card's used memory over the last ten minutes, on the
  // device's full scale.
  function drawLive(c, id) {
    var buf = S.live.get(id) || [];
    // The width is read once per card and window size: reading it forces a
    // layout, which is not cheap with a long table below.
    if (!c.width || c.widthEpoch !== S.widthEpoch) {
      c.width = c.chart.clientWidth;
      c.widthEpoch = S.widthEpoch;
    }
    var W = Math.max(200, c.width || 320), H = 92, top = 14, bottom = 16;
    var now = S.sampleMs === null ? Date.now() : S.sampleMs, t0 = now - LIVE_WINDOW_MS;
    var ymax = c.totalBytes || 0;
    buf.forEach(function (p) { if (p.used > ymax) ymax = p.used; });
    var s = svg('svg', { width: W, height: H, class: 'live', 'data-points': buf.length, role: 'img',
      'aria-label': 'used memory, last 10 minutes' });
    var x = function (t) { return (t - t0) / LIVE_WINDOW_MS * W; };
    var y = function (v) { return top + (H - top - bottom) * (1 - (ymax > 0 ? v / ymax : 0)); };
    [0.25, 0.5, 0.75, 1].forEach(function (f) {
      s.append(svg('line', { x1: 0, x2: W, y1: y(ymax * f), y2: y(ymax * f), class: 'grid' }));
    });
    s.append(svg('line', { x1: 0, x2: W, y1: y(0), y2: y(0), class: 'axis' }));
    if (buf.length) {
      var pts = buf.map(function (p) { return x(p.t).toFixed(1) + ',' + y(p.used).toFixed(1); });
      var area = 'M' + x(buf[0].t).toFixed(1) + ',' + y(0) + ' L' + pts.join(' L') +
        ' L' + x(buf[buf.length - 1].t).toFixed(1) + ',' + y(0) + ' Z';
      s.append(svg('path', { d: area, class: 'live-area' }));
      s.append(svg('polyline', { points: pts.join(' '), class: 'live-line' }));
    }
    var lab = function (tx, xx, anchor) {
      var t = svg('text', { x: xx, y: H - 3, class: 'tick', 'text-anchor': anchor });
      t.textContent = tx;
      s.append(t);
    };
    lab('−10 min', 0, 'start');
    lab('−5', W / 2, 'middle');
    lab('now', W, 'end');
    var tt = svg('text', { x: 0, y: top - 4, class: 'tick' });
    tt.textContent = bytes(ymax);
    s.append(tt);
    clear(c.chart);
    c.chart.append(s);
  }

  // ---- process table -----------------------------------------------------------

  // Badge colours by flag. The sampler names flags with hyphens
  // (no-such-process); both spellings are taken.
  var FLAG_CLASS = {
    leak: 'red', orphaned: 'orange', zombie: 'orange', no_such_process: 'orange',
    jupyter: 'grey', idle: 'grey', no_permission: 'grey'
  };
  function flagClass(f) { return FLAG_CLASS[f.replace(/-/g, '_')] || 'grey'; }

  function flagsOf(p) {
    var f = arr(p.flags).map(str).filter(Boolean);
    if (p.leak && obj(p.leak).verdict === 'leak' && f.indexOf('leak') < 0) f.unshift('leak');
    return f;
  }
  function workload(p) {
    var ns = str(p.namespace), pod = str(p.pod);
    return ns && pod ? ns + '/' + pod : (pod || ns);
  }

  var SORT = {
    gpu: function (p) { return num(p.gpu_index, -1); },
    pid: function (p) { return num(p.pid, 0); },
    user: function (p) { return str(p.user).toLowerCase(); },
    command: function (p) { return str(p.command).toLowerCase(); },
    used: function (p) { return p.memory_known === false ? -1 : num(p.used_bytes, -1); },
    growth: function (p) { var g = growth(p); return g === null ? -Infinity : g; },
    flags: function (p) { return flagsOf(p).join(' '); },
    workload: function (p) { return workload(p).toLowerCase(); }
  };

  function makeRow(key) {
    var r = { key: key, cells: {} };
    r.tr = el('tr', { 'data-key': key });
    ['gpu', 'pid', 'user', 'command', 'used', 'spark', 'growth', 'flags', 'workload', 'act'].forEach(function (k) {
      var td = el('td', { class: 'c-' + k });
      r.cells[k] = td;
      r.tr.append(td);
    });
    r.cells.pid.classList.add('num');
    r.cells.used.classList.add('num');
    r.cells.growth.classList.add('num');
    r.pidLink = el('button', { type: 'button', class: 'link pid-link', title: 'Show this process in the history chart' });
    r.pidLink.addEventListener('click', function () {
      var q = S.procs.get(r.key);
      if (q) showHistory(str(q.gpu_uuid), procChoice(q));
    });
    r.cells.pid.append(r.pidLink);
    r.spark = svg('svg', { width: 96, height: 22, class: 'spark', 'data-points': 0 });
    r.sparkLine = svg('polyline', { points: '', class: 'spark-line' });
    r.sparkTip = svg('title');
    r.spark.append(r.sparkLine, r.sparkTip);
    r.cells.spark.append(r.spark);
    r.cells.act.hidden = true;
    r.act = '';
    return r;
  }

  function setTitle(e, t) { if (e.title !== t) e.title = t; }

  function updateRow(r, p, mutations) {
    var c = r.cells;
    setText(c.gpu, num(p.gpu_index, null) === null ? '?' : String(p.gpu_index));
    setTitle(c.gpu, str(p.gpu_uuid));
    setText(r.pidLink, String(num(p.pid, 0)));
    setText(c.user, str(p.user) || '?');
    var cmd = str(p.command);
    setText(c.command, cmd.length > 60 ? cmd.slice(0, 59) + '…' : cmd);
    setTitle(c.command, cmd);
    setText(c.used, p.memory_known === false ? 'n/a' : bytes(p.used_bytes));
    sparkline(r, arr(p.recent));
    var g = growth(p), leak = !!(p.leak && obj(p.leak).verdict === 'leak');
    setText(c.growth, g === null ? '—' : (g >= 0 ? '+' : '') + g.toFixed(Math.abs(g) >= 100 ? 0 : 1) + ' MiB/min');
    if (r.leak !== leak) { r.leak = leak; c.growth.classList.toggle('leak', leak); }
    var calm = g !== null && !leak; // a verdict of no leak: the slope, muted
    if (r.calm !== calm) { r.calm = calm; c.growth.classList.toggle('calm', calm); }
    setTitle(c.growth, p.leak ? str(obj(p.leak).reason) : '');
    var flags = flagsOf(p), fk = flags.join(' ');
    if (r.flags !== fk) {
      r.flags = fk;
      clear(c.flags);
      flags.forEach(function (f) {
        c.flags.append(el('span', { class: 'badge flag ' + flagClass(f), 'data-flag': f, text: f.replace(/[_-]/g, ' ') }));
      });
    }
    setText(c.workload, workload(p));
    setTitle(c.workload, [str(p.container_name) && 'container ' + str(p.container_name),
      str(p.container) && 'id ' + str(p.container)].filter(Boolean).join(', '));
    // Buttons only for a process the daemon can signal: one not visible in
    // /proc (no start time to check) or a zombie gets the reason instead.
    var why = p.signalable === true ? '' : (str(p.not_signalable_reason) || 'the daemon cannot signal this process');
    var act = mutations ? (why ? 'no:' + why : 'yes') : '';
    if (r.act !== act) {
      r.act = act;
      c.act.hidden = !mutations;
      clear(c.act);
      if (mutations && !why) {
        c.act.append(
          el('button', { type: 'button', class: 'sig term', 'data-signal': 'TERM', text: 'terminate' }),
          el('button', { type: 'button', class: 'sig kill', 'data-signal': 'KILL', text: 'kill' }));
      } else if (mutations) {
        c.act.append(el('span', { class: 'nosig', title: why, 'data-reason': why, text: 'not signalable' }));
      }
    }
  }

  // sparkline redraws a row's sparkline when its samples changed; the SVG
  // elements are made once per row.
  function sparkline(r, recent) {
    var vals = [];
    recent.forEach(function (v) { v = num(v, null); if (v !== null) vals.push(v); });
    var key = vals.join(',');
    if (r.sparkKey === key) return;
    r.sparkKey = key;
    var W = 96, H = 22, pts = '', tip = '';
    if (vals.length > 1) {
      var lo = Math.min.apply(null, vals), hi = Math.max.apply(null, vals);
      if (hi - lo < hi * 0.02) { lo = Math.max(0, lo - hi * 0.01); hi = hi + hi * 0.01 + 1; }
      pts = vals.map(function (v, i) {
        return (i / (vals.length - 1) * (W - 2) + 1).toFixed(1) + ',' +
          (H - 2 - (v - lo) / (hi - lo) * (H - 4)).toFixed(1);
      }).join(' ');
      tip = bytes(lo) + ' – ' + bytes(hi);
    }
    r.spark.setAttribute('data-points', vals.length);
    r.sparkLine.setAttribute('points', pts);
    r.sparkTip.textContent = tip;
  }

  function renderProcs(s) {
    var mutations = s.mutations === true;
    var q = S.filter.toLowerCase();
    var all = arr(s.processes).map(obj);
    S.procs = new Map();
    all.forEach(function (p) { S.procs.set(procKey(p), p); });
    var list = all.filter(function (p) {
      if (!q) return true;
      var hay = ['gpu' + num(p.gpu_index, ''), num(p.pid, ''), p.user, p.command, flagsOf(p).join(' '),
        p.pod, p.namespace, p.container_name].map(str).join(' ').toLowerCase();
      return hay.indexOf(q) >= 0;
    });
    // Sort keys are computed once per process, not once per comparison.
    var key = SORT[S.sort.key] || SORT.used, dir = S.sort.dir;
    list = list.map(function (p) { return { p: p, k: key(p), u: SORT.used(p), pid: SORT.pid(p) }; });
    list.sort(function (a, b) {
      if (a.k < b.k) return -dir;
      if (a.k > b.k) return dir;
      return b.u - a.u || a.pid - b.pid;
    });
    list = list.map(function (e) { return e.p; });
    // Past ROW_LIMIT rows the table shows the first ones (in the chosen
    // order, after the filter) until asked for all: a table of thousands
    // of rows costs the browser far more to lay out every second than it
    // tells anyone.
    var shown = S.showAll ? list : list.slice(0, ROW_LIMIT);
    var nodes = [], seen = new Set();
    shown.forEach(function (p) {
      var k = procKey(p);
      if (seen.has(k)) return;
      seen.add(k);
      var r = S.rows.get(k);
      if (!r) { r = makeRow(k); S.rows.set(k, r); }
      updateRow(r, p, mutations);
      nodes.push(r.tr);
    });
    S.rows.forEach(function (r, k) { if (!S.procs.has(k)) S.rows.delete(k); });
    order($('#procs tbody'), nodes);
    $('.act-col').hidden = !mutations;
    setText($('#proc-count'), list.length === all.length ? String(all.length) : list.length + ' of ' + all.length);
    $('#procs-empty').hidden = list.length > 0;
    var more = $('#procs-more');
    more.hidden = list.length <= ROW_LIMIT;
    setText(more, S.showAll ? 'Show the first ' + ROW_LIMIT + ' only' : 'Show all ' + list.length + ' (' + ROW_LIMIT + ' shown)');
    document.querySelectorAll('#procs th[data-key]').forEach(function (th) {
      var on = th.dataset.key === S.sort.key;
      th.classList.toggle('sorted', on);
      th.setAttribute('aria-sort', on ? (dir > 0 ? 'ascending' : 'descending') : 'none');
      th.dataset.arrow = on ? (dir > 0 ? '▲' : '▼') : '';
    });
  }

  // ---- alerts and actions --------------------------------------------------------

  function alertId(a) { return [str(a.rule), str(a.gpu_uuid), num(a.pid, 0)].join('|'); }

  function renderAlerts() {
    var firing = new Map();
    arr(S.state && S.state.alerts).map(obj).forEach(function (a) { firing.set(alertId(a), a); });
    S.alertEvents.map(obj).forEach(function (a) {
      if (str(a.state) === 'resolved') firing.delete(alertId(a));
      else firing.set(alertId(a), a);
    });
    var ul = $('#alerts');
    clear(ul);
    var list = Array.from(firing.values()).sort(function (a, b) {
      return (str(b.severity) === 'critical') - (str(a.severity) === 'critical') || (ms(b.time) || 0) - (ms(a.time) || 0);
    });
    list.forEach(function (a) {
      var sev = str(a.severity) || 'warning';
      var where = [str(a.gpu_uuid) && gpuLabel(str(a.gpu_uuid)), num(a.pid, 0) && 'PID ' + a.pid].filter(Boolean).join(' · ');
      var t = ms(a.time);
      ul.append(el('li', { class: 'alert ' + sev },
        el('span', { class: 'badge sev ' + sev, text: sev }),
        el('b', { text: str(a.rule) || 'alert' }),
        where ? el('span', { class: 'where', text: where }) : null,
        el('span', { class: 'msg', text: str(a.message) }),
        el('span', { class: 'when', text: t === null ? '' : 'since ' + dayClock(t) })));
    });
    setText($('#alert-count'), list.length ? String(list.length) : '');
    $('#alerts-empty').hidden = list.length > 0;
  }

  function gpuLabel(uuid) {
    var d = arr(S.state && S.state.devices).map(obj).find(function (x) { return str(x.gpu_uuid) === uuid; });
    return d ? 'GPU ' + num(d.gpu_index, '?') : uuid;
  }

  function actionId(a) { return [str(a.time), num(a.pid, 0), str(a.action), str(a.rule)].join('|'); }

  function addAction(a) {
    var id = actionId(a);
    if (S.actions.some(function (x) { return actionId(x) === id; })) return;
    S.actions.unshift(a);
    renderActions();
  }

  function renderActions() {
    var tb = $('#actions tbody');
    clear(tb);
    S.actions.slice(0, 100).forEach(function (a) {
      a = obj(a);
      var t = ms(a.time), res = str(a.result);
      tb.append(el('tr', null,
        el('td', { text: t === null ? '?' : dayClock(t) }),
        el('td', { text: str(a.rule) }),
        el('td', { class: 'num', text: String(num(a.pid, 0)) }),
        el('td', { text: str(a.action) }),
        el('td', { class: /fail|error|refus/i.test(res) ? 'bad' : '', text: res }),
        el('td', { class: 'reason', text: str(a.reason), title: str(a.reason) })));
    });
    setText($('#action-count'), S.actions.length ? String(S.actions.length) : '');
    $('#actions-empty').hidden = S.actions.length > 0;
  }

  // ---- signal dialog ---------------------------------------------------------------

  function openSignal(p, sig) {
    S.signal = { proc: p, sig: sig };
    var verb = sig === 'KILL' ? 'Kill' : 'Terminate';
    setText($('#sig-title'), verb + ' process ' + num(p.pid, 0) + ' (SIG' + sig + ')?');
    setText($('#sig-pid'), String(num(p.pid, 0)));
    setText($('#sig-command'), str(p.command) || '?');
    setText($('#sig-memory'), (p.memory_known === false ? 'n/a' : bytes(p.used_bytes)) + ' on GPU ' + num(p.gpu_index, '?'));
    setText($('#sig-user'), str(p.user) || '?');
    var tok = '';
    try { tok = sessionStorage.getItem(TOKEN_KEY) || ''; } catch (e) { tok = ''; }
    $('#sig-token').value = tok;
    $('#sig-error').hidden = true;
    setText($('#sig-confirm'), 'Send SIG' + sig);
    $('#sig-confirm').disabled = false;
    var d = $('#signal-dialog');
    if (typeof d.showModal === 'function') d.showModal(); else d.setAttribute('open', '');
    (tok ? $('#sig-reason') : $('#sig-token')).focus();
  }

  function closeSignal() {
    S.signal = null;
    var d = $('#signal-dialog');
    if (typeof d.close === 'function') d.close(); else d.removeAttribute('open');
  }

  function sendSignal(ev) {
    ev.preventDefault();
    if (!S.signal) return;
    var p = S.signal.proc, sig = S.signal.sig;
    var token = $('#sig-token').value.trim();
    var err = $('#sig-error');
    if (!token) {
      err.textContent = 'A bearer token is needed.';
      err.hidden = false;
      return;
    }
    try { sessionStorage.setItem(TOKEN_KEY, token); } catch (e) { /* storage off: ask each time */ }
    var btn = $('#sig-confirm');
    btn.disabled = true;
    err.hidden = true;
    var body = { pid: num(p.pid, 0), start_time: str(p.start_time), signal: sig, reason: $('#sig-reason').value };
    fetch('api/v1/signal', {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', Accept: 'application/json', Authorization: 'Bearer ' + token },
      body: JSON.stringify(body)
    }).then(function (r) {
      return r.json().catch(function () { return null; }).then(function (b) {
        if (!r.ok) throw new Error(apiError(r, b));
        return obj(b);
      });
    }).then(function (res) {
      closeSignal();
      var a = obj(res.action);
      if (a.time) addAction(a);
      notice('PID ' + body.pid + ': SIG' + sig + ' ' + (str(a.result) || 'sent'));
    }, function (e) {
      btn.disabled = false;
      err.textContent = e.message;
      err.hidden = false;
    });
  }

  var noticeTimer = 0;
  function notice(msg) {
    var n = $('#notice');
    n.textContent = msg;
    n.hidden = false;
    clearTimeout(noticeTimer);
    noticeTimer = setTimeout(function () { n.hidden = true; }, 6000);
  }

  // ---- history -------------------------------------------------------------------

  function procChoice(p) { return num(p.pid, 0) + '|' + str(p.start_time); }

  function renderHistoryChoices(s) {
    var sel = $('#hist-gpu');
    var devs = arr(s.devices).map(obj).filter(function (d) { return str(d.gpu_uuid); });
    var want = devs.map(function (d) { return str(d.gpu_uuid) + '=GPU ' + num(d.gpu_index, '?') + ' · ' + str(d.name); }).join('\n');
    if (sel.dataset.opts !== want) {
      sel.dataset.opts = want;
      clear(sel);
      devs.forEach(function (d) {
        sel.append(el('option', { value: str(d.gpu_uuid), text: 'GPU ' + num(d.gpu_index, '?') + ' · ' + str(d.name) }));
      });
      if (S.hist.gpu && devs.some(function (d) { return str(d.gpu_uuid) === S.hist.gpu; })) sel.value = S.hist.gpu;
    }
    var first = !S.hist.gpu && devs.length;
    if (first) S.hist.gpu = str(devs[0].gpu_uuid);
    renderProcChoices();
    if (first) loadHistory();
  }

  function renderProcChoices() {
    var sel = $('#hist-proc');
    var procs = arr(S.state && S.state.processes).map(obj).filter(function (p) { return str(p.gpu_uuid) === S.hist.gpu; });
    var opts = [['', 'whole GPU']];
    procs.forEach(function (p) {
      var cmd = str(p.command);
      opts.push([procChoice(p), 'PID ' + num(p.pid, 0) + ' · ' + (cmd.length > 40 ? cmd.slice(0, 39) + '…' : cmd)]);
    });
    if (S.hist.proc && !opts.some(function (o) { return o[0] === S.hist.proc; })) {
      opts.push([S.hist.proc, 'PID ' + S.hist.proc.split('|')[0] + ' (gone)']);
    }
    var want = opts.map(function (o) { return o.join('='); }).join('\n');
    if (sel.dataset.opts !== want) {
      sel.dataset.opts = want;
      clear(sel);
      opts.forEach(function (o) { sel.append(el('option', { value: o[0], text: o[1] })); });
    }
    sel.value = S.hist.proc;
  }

  function showHistory(gpu, proc) {
    S.hist.gpu = gpu;
    S.hist.proc = proc || '';
    S.hist.zoom = null;
    $('#hist-gpu').value = gpu;
    renderProcChoices();
    loadHistory();
    $('#history-section').scrollIntoView({ block: 'start' });
  }

  function histURL(h) {
    var q, span;
    if (h.zoom) {
      var from = Math.floor(h.zoom[0] / 1000), to = Math.ceil(h.zoom[1] / 1000);
      span = to - from;
      q = 'from=' + from + '&to=' + to;
    } else {
      var r = RANGES[h.range] || RANGES['1h'];
      span = r[0];
      q = 'from=' + encodeURIComponent(r[1]);
    }
    q += '&step=' + Math.max(1, Math.ceil(span / HIST_POINTS)) + 's';
    var base = 'api/v1/history/';
    if (h.proc) {
      base += 'processes/' + encodeURIComponent(h.gpu) + '/' + encodeURIComponent(h.proc.split('|')[0]);
    } else {
      base += 'devices/' + encodeURIComponent(h.gpu);
    }
    return base + '?' + q;
  }

  function loadHistory() {
    var h = S.hist;
    if (!h.gpu) return;
    var seq = ++h.seq;
    var url = histURL(h);
    $('#reset-zoom').disabled = !h.zoom;
    document.querySelectorAll('#ranges button').forEach(function (b) {
      b.setAttribute('aria-pressed', String(!h.zoom && b.dataset.range === h.range));
    });
    setText($('#hist-status'), 'Loading…');
    getJSON(url).then(function (body) {
      if (seq !== h.seq) return; // a newer request is under way
      h.view = historyView(h, body);
      drawHistory();
    }, function (e) {
      if (seq !== h.seq) return;
      h.view = null;
      drawHistory();
      setText($('#hist-status'), 'Could not read the history: ' + e.message);
    });
  }

  // historyView turns a history answer into what the chart draws: points
  // {t, min, max, mean} in bytes and the time domain.
  function historyView(h, body) {
    var start = h.proc ? h.proc.split('|').slice(1).join('|') : '';
    var raw = arr(body.points).map(obj), pts = [];
    if (h.proc && start) {
      var same = raw.filter(function (p) { return str(p.start_time) === start || ms(p.start_time) === ms(start); });
      if (same.length) raw = same; // else: show every lifetime of that PID
    }
    var total = 0;
    raw.forEach(function (p) {
      var r = obj(p.used_bytes), t = ms(p.t);
      if (t === null) return;
      var mean = num(r.mean, null), lo = num(r.min, mean), hi = num(r.max, mean);
      if (mean === null && lo !== null && hi !== null) mean = (lo + hi) / 2;
      if (mean === null) return;
      // What vram's allocator inside the process had allocated and
      // reserved (null when the process was not on it).
      // A device point's reserved_bytes is the driver's: not read here.
      var a = h.proc && p.allocated_bytes ? num(obj(p.allocated_bytes).mean, null) : null;
      var rs = h.proc && p.reserved_bytes ? num(obj(p.reserved_bytes).mean, null) : null;
      if (a === null || rs === null) a = rs = null;
      pts.push({ t: t, min: lo, max: hi, mean: mean, alloc: a, res: rs });
      total = Math.max(total, num(p.total_bytes, 0));
    });
    pts.sort(function (a, b) { return a.t - b.t; });
    var step = num(body.step_seconds, 0) * 1000;
    var from = ms(body.from), to = ms(body.to);
    if (from === null || to === null) {
      if (h.zoom) { from = h.zoom[0]; to = h.zoom[1]; } else {
        to = S.sampleMs || Date.now();
        from = to - (RANGES[h.range] || RANGES['1h'])[0] * 1000;
      }
    }
    return { points: pts, from: from, to: to, step: step, total: total, proc: !!h.proc };
  }

  var CH = { H: 280, L: 64, R: 16, T: 12, B: 26 };

  function niceStep(span, n) {
    var raw = span / n, mag = Math.pow(10, Math.floor(Math.log10(raw)));
    var f = raw / mag;
    return (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * mag;
  }
  var TIME_STEPS = [1, 5, 10, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400, 172800];

  function drawHistory() {
    var box = $('#hist-chart'), v = S.hist.view;
    var W = Math.max(320, box.clientWidth || 800), H = CH.H;
    var pw = W - CH.L - CH.R, ph = H - CH.T - CH.B;
    var s = svg('svg', { width: W, height: H, class: 'hist', 'data-points': v ? v.points.length : 0 });
    clear(box);
    box.append(s);
    if (!v) return;
    var pts = v.points;
    // The scale fits the data (from 0), so that a change of a few GiB on a
    // 141 GiB device is visible; the device's total is drawn when in range.
    var ymax = 0, nalloc = 0;
    pts.forEach(function (p) {
      if (p.max > ymax) ymax = p.max;
      if (p.res !== null) { nalloc++; if (p.res > ymax) ymax = p.res; }
    });
    s.setAttribute('data-alloc-points', nalloc);
    ymax *= 1.1;
    if (v.total && !v.proc && ymax > v.total * 0.8) ymax = Math.max(ymax, v.total);
    if (ymax <= 0) ymax = GiB;
    var unit = ymax >= 2 * GiB ? GiB : MiB, uname = unit === GiB ? ' GiB' : ' MiB';
    var ystep = niceStep(ymax / unit, 4) * unit;
    ymax = Math.ceil(ymax / ystep) * ystep;
    var span = Math.max(1, v.to - v.from);
    var x = function (t) { return CH.L + (t - v.from) / span * pw; };
    var y = function (b) { return CH.T + ph * (1 - b / ymax); };
    v.x = x;
    v.W = W;
    for (var g = 0; g <= ymax + 1; g += ystep) {
      s.append(svg('line', { x1: CH.L, x2: W - CH.R, y1: y(g), y2: y(g), class: g ? 'grid' : 'axis' }));
      var lab = svg('text', { x: CH.L - 6, y: y(g) + 4, class: 'tick', 'text-anchor': 'end' });
      lab.textContent = (g / unit).toFixed(ystep < unit ? 1 : 0) + uname;
      s.append(lab);
    }
    var tstep = TIME_STEPS.find(function (st) { return span / 1000 / st <= 7; }) || 604800 / 7 * 2;
    tstep *= 1000;
    var tz = new Date().getTimezoneOffset() * 60000;
    for (var t = Math.ceil((v.from - tz) / tstep) * tstep + tz; t <= v.to; t += tstep) {
      s.append(svg('line', { x1: x(t), x2: x(t), y1: CH.T, y2: CH.T + ph, class: 'grid' }));
      var tl = svg('text', { x: x(t), y: H - 8, class: 'tick', 'text-anchor': 'middle' });
      tl.textContent = span > 86400000 ? dayClock(t) : clock(t, tstep < 60000);
      s.append(tl);
    }
    if (v.total && !v.proc && v.total <= ymax) {
      s.append(svg('line', { x1: CH.L, x2: W - CH.R, y1: y(v.total), y2: y(v.total), class: 'total' }));
    }
    // Contiguous runs: a gap of more than 2.5 steps breaks the band and line.
    var gap = Math.max(v.step * 2.5, span / 200), runs = [], run = [];
    pts.forEach(function (p, i) {
      if (i && p.t - pts[i - 1].t > gap) { runs.push(run); run = []; }
      run.push(p);
    });
    if (run.length) runs.push(run);
    runs.forEach(function (r) {
      var hi = r.map(function (p) { return x(p.t).toFixed(1) + ',' + y(p.max).toFixed(1); });
      var lo = r.slice().reverse().map(function (p) { return x(p.t).toFixed(1) + ',' + y(p.min).toFixed(1); });
      s.append(svg('polygon', { points: hi.concat(lo).join(' '), class: 'band' }));
      s.append(svg('polyline', { points: r.map(function (p) { return x(p.t).toFixed(1) + ',' + y(p.mean).toFixed(1); }).join(' '), class: 'mean' }));
      if (r.length === 1) s.append(svg('circle', { cx: x(r[0].t), cy: y(r[0].mean), r: 2.5, class: 'dot' }));
      allocRuns(r).forEach(function (ar) {
        // The allocator's band: allocated (bottom edge, a line) to
        // reserved (top edge), the memory its cache keeps unallocated.
        var top = ar.map(function (p) { return x(p.t).toFixed(1) + ',' + y(p.res).toFixed(1); });
        var bottom = ar.slice().reverse().map(function (p) { return x(p.t).toFixed(1) + ',' + y(p.alloc).toFixed(1); });
        s.append(svg('polygon', { points: top.concat(bottom).join(' '), class: 'alloc-band' }));
        s.append(svg('polyline', { points: bottom.slice().reverse().join(' '), class: 'alloc-line' }));
      });
    });
    if (nalloc) {
      var lg = svg('text', { x: W - CH.R - 4, y: CH.T + 12, class: 'tick alloc-legend', 'text-anchor': 'end' });
      lg.textContent = 'band: allocated to reserved (vram allocator)';
      s.append(lg);
    }
    var plot = svg('rect', { x: CH.L, y: CH.T, width: pw, height: ph, class: 'plot' });
    s.append(plot);
    S.hist.sel = svg('rect', { x: 0, y: CH.T, width: 0, height: ph, class: 'selection', visibility: 'hidden' });
    S.hist.cursor = svg('line', { x1: 0, x2: 0, y1: CH.T, y2: CH.T + ph, class: 'cursor', visibility: 'hidden' });
    s.append(S.hist.sel, S.hist.cursor);
    var h = S.hist;
    var what = h.proc ? 'PID ' + h.proc.split('|')[0] + ' on ' + gpuLabel(h.gpu) : gpuLabel(h.gpu);
    setText($('#hist-status'), what + ': ' + pts.length + ' points from ' + dayClock(v.from) + ' to ' +
      dayClock(v.to) + (v.step ? ', ' + stepText(v.step) + ' each' : '') +
      (pts.length ? '' : ' (no history in this range)'));
  }

  // allocRuns splits a run of points into the runs that have allocator
  // figures.
  function allocRuns(r) {
    var out = [], cur = [];
    r.forEach(function (p) {
      if (p.res === null) { if (cur.length) out.push(cur); cur = []; return; }
      cur.push(p);
    });
    if (cur.length) out.push(cur);
    return out;
  }

  function stepText(msStep) {
    var s = msStep / 1000;
    if (s < 120) return s.toFixed(0) + ' s';
    if (s < 7200) return (s / 60).toFixed(0) + ' min';
    return (s / 3600).toFixed(1) + ' h';
  }

  // Zoom: drag across the plot to select a time range.
  function plotX(ev) {
    var svgEl = $('#hist-chart svg');
    if (!svgEl) return null;
    var r = svgEl.getBoundingClientRect();
    var v = S.hist.view;
    var W = v ? v.W : r.width;
    return Math.max(CH.L, Math.min(W - CH.R, ev.clientX - r.left));
  }
  function timeAt(px) {
    var v = S.hist.view;
    return v.from + (px - CH.L) / (v.W - CH.L - CH.R) * (v.to - v.from);
  }

  function onChartDown(ev) {
    if (ev.button !== 0 || !S.hist.view) return;
    var px = plotX(ev);
    if (px === null) return;
    S.hist.drag = { x0: px, x1: px };
    ev.preventDefault();
  }
  function onMove(ev) {
    var h = S.hist;
    if (!h.view || !h.sel) return;
    if (h.drag) {
      h.drag.x1 = plotX(ev);
      var a = Math.min(h.drag.x0, h.drag.x1), b = Math.max(h.drag.x0, h.drag.x1);
      setAttrs(h.sel, { x: a, width: b - a, visibility: 'visible' });
      return;
    }
    var box = $('#hist-chart').getBoundingClientRect();
    if (ev.clientY < box.top || ev.clientY > box.bottom || ev.clientX < box.left || ev.clientX > box.right) {
      h.cursor.setAttribute('visibility', 'hidden');
      return;
    }
    readout(plotX(ev));
  }
  function onUp(ev) {
    var h = S.hist, d = h.drag;
    if (!d) return;
    h.drag = null;
    if (h.sel) h.sel.setAttribute('visibility', 'hidden');
    d.x1 = plotX(ev);
    if (d.x1 === null || Math.abs(d.x1 - d.x0) < 6) return;
    var t0 = timeAt(Math.min(d.x0, d.x1)), t1 = timeAt(Math.max(d.x0, d.x1));
    if (t1 - t0 < MIN_ZOOM_MS) {
      var mid = (t0 + t1) / 2;
      t0 = mid - MIN_ZOOM_MS / 2;
      t1 = mid + MIN_ZOOM_MS / 2;
    }
    h.zoom = [t0, t1];
    loadHistory();
  }

  function readout(px) {
    var h = S.hist, v = h.view;
    if (!v || !v.points.length) return;
    var t = timeAt(px), best = null;
    v.points.forEach(function (p) { if (!best || Math.abs(p.t - t) < Math.abs(best.t - t)) best = p; });
    var bx = v.x(best.t);
    setAttrs(h.cursor, { x1: bx, x2: bx, visibility: 'visible' });
    setText($('#hist-readout'), dayClock(best.t) + (v.step < 60000 ? ':' + pad2(new Date(best.t).getSeconds()) : '') +
      ' · mean ' + bytes(best.mean) + ' · min ' + bytes(best.min) + ' · max ' + bytes(best.max) +
      (best.res !== null ? ' · allocated ' + bytes(best.alloc) + ' · reserved ' + bytes(best.res) : ''));
  }

  // ---- wiring ----------------------------------------------------------------------

  function init() {
    $('#filter').addEventListener('input', function (e) {
      S.filter = e.target.value.trim();
      if (S.state) renderProcs(S.state);
    });
    document.querySelectorAll('#procs th[data-key]').forEach(function (th) {
      th.tabIndex = 0;
      var sortBy = function () {
        var k = th.dataset.key;
        if (S.sort.key === k) S.sort.dir = -S.sort.dir;
        else S.sort = { key: k, dir: (k === 'used' || k === 'growth') ? -1 : 1 };
        if (S.state) renderProcs(S.state);
      };
      th.addEventListener('click', sortBy);
      th.addEventListener('keydown', function (e) { if (e.key === 'Enter' || e.key === ' ') { e.preventDefault(); sortBy(); } });
    });
    $('#procs tbody').addEventListener('click', function (e) {
      var b = e.target.closest('button[data-signal]');
      if (!b) return;
      var tr = b.closest('tr'), p = tr && S.procs.get(tr.dataset.key);
      if (p && p.signalable === true) openSignal(p, b.dataset.signal);
    });
    $('#procs-more').addEventListener('click', function () {
      S.showAll = !S.showAll;
      if (S.state) renderProcs(S.state);
    });
    $('#signal-form').addEventListener('submit', sendSignal);
    $('#sig-cancel').addEventListener('click', closeSignal);
    $('#signal-dialog').addEventListener('close', function () { S.signal = null; });

    $('#hist-gpu').addEventListener('change', function (e) { showHistory(e.target.value, ''); });
    $('#hist-proc').addEventListener('change', function (e) {
      S.hist.proc = e.target.value;
      S.hist.zoom = null;
      loadHistory();
    });
    document.querySelectorAll('#ranges button').forEach(function (b) {
      b.addEventListener('click', function () {
        S.hist.range = b.dataset.range;
        S.hist.zoom = null;
        loadHistory();
      });
    });
    $('#reset-zoom').addEventListener('click', function () {
      S.hist.zoom = null;
      loadHistory();
    });
    $('#hist-chart').addEventListener('mousedown', onChartDown);
    window.addEventListener('mousemove', onMove);
    window.addEventListener('mouseup', onUp);
    var resizeTimer = 0;
    window.addEventListener('resize', function () {
      clearTimeout(resizeTimer);
      resizeTimer = setTimeout(function () {
        S.widthEpoch++;
        drawHistory();
        S.cards.forEach(function (c, id) { drawLive(c, id); });
      }, 150);
    });
    // A history range that ends now is refreshed while it is on screen.
    setInterval(function () {
      if (S.hist.gpu && !S.hist.zoom && !S.hist.drag && !document.hidden) loadHistory();
    }, 60000);
    setInterval(tick, 1000);

    renderActions();
    renderAlerts();
    loadState();
    loadActions();
    connect();
  }

  // A hook for tests and the console: feed a State by hand.
  window.vramDashboard = { applyState: applyState, formatBytes: bytes };

  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', init);
  else init();
})();
