// outpost's web UI: signs in with a token (kept in sessionStorage, sent as a bearer token),
// shows contexts, runs and the audit log from the JSON API, and a terminal on a context
// through the viewer WebSocket (docs/PROTOCOL.md, "Viewer WebSocket messages").
(function () {
  "use strict";

  var TOKEN_KEY = "outpost.token";
  var $ = function (id) { return document.getElementById(id); };

  // ---- the API ----

  function token() { return sessionStorage.getItem(TOKEN_KEY); }

  // Calls the API; resolves to the JSON body, rejects with {status, code, message}.
  function api(method, path, body) {
    var init = { method: method, headers: { "Authorization": "Bearer " + token() } };
    if (body !== undefined) {
      init.headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    return fetch(path, init).then(function (response) {
      return response.text().then(function (text) {
        var value = null;
        try { value = text ? JSON.parse(text) : null; } catch (e) { value = null; }
        if (response.ok) { return value; }
        var err = (value && value.error) || {};
        throw {
          status: response.status,
          code: err.code || "http_" + response.status,
          message: err.message || response.statusText
        };
      });
    }, function (e) {
      throw { status: 0, code: "unreachable", message: "the server did not answer (" + e + ")" };
    });
  }

  function describe(err) { return err.code + ": " + err.message; }

  function showError(err) {
    var box = $("error");
    if (!err) { box.hidden = true; box.textContent = ""; return; }
    box.textContent = describe(err);
    box.hidden = false;
    if (err.status === 401) { signOut(); showSignInError(err); }
  }

  // ---- rendering helpers ----

  function cell(row, text, className) {
    var td = document.createElement("td");
    td.textContent = text === undefined || text === null ? "" : String(text);
    if (className) { td.className = className; }
    row.appendChild(td);
    return td;
  }

  // A cell of `row` holding a button `text` that does `onClick`; `data` goes to its dataset.
  function buttonCell(row, text, onClick, data, className) {
    var button = document.createElement("button");
    button.type = "button";
    button.textContent = text;
    Object.keys(data || {}).forEach(function (k) { button.dataset[k] = data[k]; });
    button.addEventListener("click", onClick);
    cell(row, "", className).appendChild(button);
    return button;
  }

  function fill(tableId, items, columns, emptyText) {
    var body = $(tableId).tBodies[0];
    body.textContent = "";
    if (!items.length) {
      var row = body.insertRow();
      var td = cell(row, emptyText, "empty");
      td.colSpan = $(tableId).tHead.rows[0].cells.length;
      return;
    }
    items.forEach(function (item) {
      var row = body.insertRow();
      columns(item, row);
    });
  }

  function when(seconds) {
    if (typeof seconds !== "number") { return ""; }
    return new Date(seconds * 1000).toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z");
  }

  function grantSummary(grant) {
    if (!grant) { return ""; }
    var parts = [];
    var folders = (grant.fs || []).map(function (f) { return f.path + " " + f.mode; });
    parts.push("folders: " + (folders.length ? folders.join(", ") : "none"));
    var egress = grant.egress || {};
    if (egress.mode === "allowlist") {
      parts.push("network: " + (egress.hosts || []).join(", "));
    } else {
      parts.push("network: " + (egress.mode || "none"));
    }
    parts.push("commands: " + (grant.commands && grant.commands.enabled ? "on" : "off"));
    if (grant.limits) { parts.push("at most " + grant.limits.maxConcurrent + " at once"); }
    if (grant.environments) { parts.push("environments: " + grant.environments.join(", ")); }
    return parts.join("; ");
  }

  // What the machine's sandbox enforces, as its daemon announced it.
  function sandboxSummary(sandbox) {
    if (!sandbox) { return "unknown"; }
    var rule = sandbox.confinement === "operator-may-opt-out"
      ? "operator may opt out" : "every run sandboxed";
    var missing = [];
    if (!sandbox.landlock) { missing.push("no Landlock"); }
    if (!sandbox.namespaces) { missing.push("no namespaces"); }
    return rule + (missing.length ? " (" + missing.join(", ") + ")" : "");
  }

  // ---- the tabs ----

  var contexts = [];
  var me = null; // GET /v1/me: {user, admin, …}

  function loadContexts() {
    return api("GET", "/v1/execution-contexts").then(function (value) {
      contexts = (value && value.contexts) || [];
      fill("contexts", contexts, function (c, row) {
        buttonCell(row, c.name, function () { showContext(c.id); }, { context: c.name }, "name");
        var badge = document.createElement("span");
        badge.className = "badge " + (c.online ? "online" : "offline");
        badge.textContent = c.online ? "online" : "offline";
        cell(row, "").appendChild(badge);
        cell(row, c.slotsUsed + "/" + c.slotsTotal);
        cell(row, grantSummary(c.grant));
        cell(row, sandboxSummary(c.sandbox));
        cell(row, c.daemonVersion || "");
      }, "No contexts yet: join a machine with `outpost daemon --join`.");
      fillContextChoice();
      return contexts;
    });
  }

  // The runs list's query from the filter bar, and the page to continue from (`next`).
  function runsQuery(before) {
    var q = ["limit=50"];
    [["context", "runs-context"], ["status", "runs-status"], ["requester", "runs-requester"]]
      .forEach(function (f) {
        var v = $(f[1]).value.trim();
        if (v) { q.push(f[0] + "=" + encodeURIComponent(v)); }
      });
    if (before) { q.push("before=" + encodeURIComponent(before)); }
    return "/v1/runs?" + q.join("&");
  }

  var shownRuns = [];

  // Loads the first page of runs (or, with `more`, the next page after those shown).
  // ---- one context: context.js renders it ----

  var contextPage = null;

  function showContext(name) {
    $("contexts").hidden = true;
    $("context").hidden = false;
    document.body.dataset.context = "loading";
    if (!contextPage) {
      contextPage = window.outpostPages.context({
        $: $, api: api, describe: describe, fact: fact, fill: fill, cell: cell,
        buttonCell: buttonCell, when: when, took: took, grantSummary: grantSummary,
        sandboxSummary: sandboxSummary,
        me: function () { return me; },
        openRun: function (id) { showTab("runs").then(function () { showRun(id); }); }
      });
    }
    return contextPage.show(name).then(function () {
      document.body.dataset.context = "shown";
    }, showError);
  }

  function leaveContext() {
    if (contextPage) { contextPage.leave(); }
    $("context").hidden = true;
    $("contexts").hidden = false;
    delete document.body.dataset.context;
  }

  $("context-back").addEventListener("click", leaveContext);

  function loadRuns(more) {
    var before = more === true && shownRuns.length ? shownRuns.nextPage : null;
    return api("GET", runsQuery(before)).then(function (value) {
      var page = (value && value.runs) || [];
      shownRuns = before ? shownRuns.concat(page) : page;
      shownRuns.nextPage = value && value.next;
      shownRuns.nextLoaded = !!before;
      $("runs-older").hidden = !shownRuns.nextPage;
      fill("runs", shownRuns, function (r, row) {
        buttonCell(row, r.executionId, function () { showRun(r.executionId); },
          { executionId: r.executionId }, "id");
        var status = r.status;
        if (typeof r.exitCode === "number") { status += " (exit " + r.exitCode + ")"; }
        if (r.error) { status += " (" + r.error.code + ")"; }
        cell(row, status);
        cell(row, r.ranOnText || "");
        cell(row, when(r.createdAt));
        cell(row, took(r.timing));
      }, "No runs yet.");
    });
  }

  // How long a run took, from what its timing holds (a cloud run has no server-side total).
  function took(t) {
    if (!t) { return ""; }
    var total = typeof t.serverMs === "number" ? t.serverMs : t.daemonMs;
    var text = typeof total === "number" ? total + " ms" : "";
    if (typeof t.executeMs === "number" && t.executeMs !== total) {
      text += (text ? " (ran " : "ran ") + t.executeMs + " ms" + (text ? ")" : "");
    }
    return text;
  }

  // ---- one run: what it is, where and why it ran, its output as it comes, cancel ----

  var shownRun = null; // {id, abort}

  function fact(body, name, value) {
    if (value === undefined || value === null || value === "") { return; }
    var row = body.insertRow();
    var th = document.createElement("th");
    th.textContent = name;
    row.appendChild(th);
    cell(row, value);
  }

  function showFacts(e) {
    var body = $("run-facts").tBodies[0];
    body.textContent = "";
    fact(body, "Run", e.executionId);
    fact(body, "Capability", e.capability ? e.capability +
      (typeof e.capabilityVersion === "number" ? " v" + e.capabilityVersion : "") : "");
    fact(body, "Requester", e.requester);
    fact(body, "Asked for", e.requestedContext || "the requester's chain");
    fact(body, "Where", e.ranOnText || (e.ranOn ? e.ranOn.name : "") ||
      (e.queue ? "waiting for " + e.queue.context : ""));
    if (e.ranOn && e.ranOn.attempts && e.ranOn.attempts.length) {
      fact(body, "Passed over", e.ranOn.attempts.map(function (a) {
        return a.name + " (" + a.reason + ")";
      }).join(", "));
    }
    var status = e.status;
    if (typeof e.exitCode === "number") { status += ", exit code " + e.exitCode; }
    if (typeof e.signal === "number") { status += ", signal " + e.signal; }
    if (e.error) { status += " — " + e.error.code + ": " + e.error.message; }
    fact(body, "Status", status);
    fact(body, "Started", when(e.createdAt));
    fact(body, "Ended", when(e.finishedAt));
    fact(body, "Took", took(e.timing));
    if (e.truncated) { fact(body, "Output", "cut at its cap"); }
    var running = e.status === "pending" || e.status === "running";
    $("run-cancel").disabled = !running;
    document.body.dataset.run = running ? "live" : "ended";
  }

  function stopFollowing() {
    if (shownRun && shownRun.abort) { shownRun.abort.abort(); }
  }

  function showRun(id) {
    stopFollowing();
    shownRun = { id: id, abort: null };
    $("runs").hidden = true;
    $("runs-filter").hidden = true;
    $("runs-older").hidden = true;
    $("run").hidden = false;
    $("run-stdout").textContent = "";
    $("run-stderr").textContent = "";
    $("run-follow").textContent = "";
    document.body.dataset.run = "loading";
    return api("GET", "/v1/executions/" + encodeURIComponent(id)).then(function (e) {
      if (!shownRun || shownRun.id !== id) { return; }
      showFacts(e);
      follow(id);
    }, showError);
  }

  // Reads the run's output stream (Server-Sent Events over fetch, which can carry the
  // token): its parts as they come, then its end.
  function follow(id) {
    var abort = new AbortController();
    shownRun.abort = abort;
    $("run-follow").textContent = "following its output…";
    fetch("/v1/executions/" + encodeURIComponent(id) + "/output?follow=true", {
      headers: { "Authorization": "Bearer " + token(), "Accept": "text/event-stream" },
      signal: abort.signal
    }).then(function (response) {
      if (!response.ok) { throw { status: response.status, code: "output_unavailable",
        message: "HTTP " + response.status }; }
      var reader = response.body.getReader();
      var decoder = new TextDecoder("utf-8");
      var buffered = "";
      function pump() {
        return reader.read().then(function (chunk) {
          if (chunk.done) { $("run-follow").textContent = ""; return; }
          buffered += decoder.decode(chunk.value, { stream: true });
          var cut;
          while ((cut = buffered.indexOf("\n\n")) >= 0) {
            onRunEvent(id, buffered.slice(0, cut));
            buffered = buffered.slice(cut + 2);
          }
          return pump();
        });
      }
      return pump();
    }).catch(function (err) {
      if (err && err.name === "AbortError") { return; }
      $("run-follow").textContent = "";
      showError(err && err.code ? err : { status: 0, code: "output_unavailable",
        message: String(err) });
    });
  }

  function onRunEvent(id, text) {
    if (!shownRun || shownRun.id !== id) { return; }
    var kind = "message";
    var data = "";
    text.split("\n").forEach(function (line) {
      if (line.indexOf("event:") === 0) { kind = line.slice(6).trim(); }
      if (line.indexOf("data:") === 0) { data += line.slice(5).trim(); }
    });
    var value = null;
    try { value = data ? JSON.parse(data) : null; } catch (e) { return; }
    if (kind === "output" && value) {
      $(value.stream === "stderr" ? "run-stderr" : "run-stdout").textContent += value.text;
    } else if (kind === "status" && value) {
      $("run-follow").textContent = value.message || value.status;
    } else if (kind === "end" && value) {
      showFacts(value);
      $("run-follow").textContent = "";
    } else if (kind === "error" && value && value.error) {
      showError(value.error);
    }
  }

  $("runs-filter").addEventListener("submit", function (event) {
    event.preventDefault();
    delete document.body.dataset.filtered;
    loadRuns().then(function () { document.body.dataset.filtered = "yes"; }, showError);
  });
  $("runs-older").addEventListener("click", function () { loadRuns(true).catch(showError); });

  // Closes the run that is open (its stream too) and shows the runs list again.
  function leaveRun() {
    stopFollowing();
    shownRun = null;
    $("run").hidden = true;
    $("runs").hidden = false;
    $("runs-filter").hidden = false;
    $("runs-older").hidden = !shownRuns.nextPage;
    delete document.body.dataset.run;
  }

  $("run-back").addEventListener("click", function () {
    leaveRun();
    loadRuns().catch(showError);
  });
  $("run-cancel").addEventListener("click", function () {
    if (!shownRun) { return; }
    $("run-cancel").disabled = true;
    api("POST", "/v1/executions/" + encodeURIComponent(shownRun.id) + "/cancel", {})
      .then(function (e) { if (shownRun) { $("run-follow").textContent = "cancelling…"; } },
        showError);
  });

  function loadAudit() {
    return api("GET", "/v1/audit").then(function (value) {
      fill("audit", (value && value.events) || [], function (e, row) {
        cell(row, when(e.at));
        cell(row, e.kind);
        cell(row, e.actor);
        // The context's name (its id on hover); the id only once the context is deleted.
        var where = cell(row, e.contextName || e.contextId || "");
        if (e.contextName && e.contextId) { where.title = e.contextId; }
        var detail = cell(row, e.detail || "");
        // A terminal session's row plays its recording (GET /v1/audit names it).
        var recorded = /^\/v1\/terminals\/([^/]+)\/recording$/.exec(e.recording || "");
        if (recorded) {
          var terminalId = decodeURIComponent(recorded[1]);
          var play = document.createElement("button");
          play.type = "button";
          play.className = "play";
          play.textContent = "Play recording";
          play.dataset.terminalId = terminalId;
          play.disabled = !terminalAvailable();
          play.title = terminalAvailable() ? "Plays the session on the Terminal tab"
            : "The browser terminal is unavailable here (see the Terminal tab)";
          play.addEventListener("click", function () {
            showTab("terminal").then(function () { playRecording(terminalId); });
          });
          detail.appendChild(document.createTextNode(" "));
          detail.appendChild(play);
        }
      }, "Nothing audited yet.");
    });
  }

  // ---- lists that refresh themselves (live.js says which list changed) ----

  var live = null;

  // Reads again the list `topic` names, if it is the one on screen; resolves when done.
  function changed(topic) {
    var tab = document.body.dataset.tab;
    var done = Promise.resolve();
    if (topic === "contexts" && tab === "contexts") {
      done = contextPage && contextPage.name() ? contextPage.refresh() : loadContexts();
    } else if (topic === "runs" && tab === "contexts" && contextPage && contextPage.name()) {
      done = contextPage.refresh();
    } else if (topic === "runs" && tab === "runs" && !shownRun && !shownRuns.nextLoaded) {
      // Only the first page is read again: older pages a person asked for stay as they are.
      done = loadRuns();
    } else if (topic === "audit" && tab === "audit") {
      done = loadAudit();
    } else if (topic === "runs" && tab === "terminal") {
      // A terminal is a run: one opened, started or ended changes both lists.
      done = loadTerminals().then(loadRecordings);
    } else {
      return done;
    }
    return done.then(function () {
      document.body.dataset.refreshed = topic + ":" +
        (parseInt((document.body.dataset.refreshed || ":0").split(":")[1], 10) + 1);
    });
  }

  var loaders = {
    contexts: loadContexts,
    runs: function () { return loadContexts().then(function () { return loadRuns(); }); },
    audit: loadAudit,
    terminal: function () {
      return loadContexts().then(loadTerminals).then(loadRecordings);
    }
  };

  function showTab(name) {
    Array.prototype.forEach.call(document.querySelectorAll("#tabs button"), function (b) {
      b.classList.toggle("active", b.dataset.tab === name);
    });
    Array.prototype.forEach.call(document.querySelectorAll(".tab"), function (s) {
      s.hidden = s.id !== "tab-" + name;
    });
    document.body.dataset.tab = name;
    showError(null);
    // A tab shows its list: a run that was open is left (its stream closed).
    leaveRun();
    leaveContext();
    var done = loaders[name]().then(function () {
      document.body.dataset.loaded = name;
    }, showError);
    if (name === "terminal") { terminalShown(); }
    return done;
  }

  // ---- signing in ----

  function showSignInError(err) {
    var box = $("sign-in-error");
    box.textContent = "Sign-in failed: " + describe(err);
    box.hidden = false;
  }

  function signedIn() {
    $("sign-in").hidden = true;
    $("app").hidden = false;
    $("sign-out").hidden = false;
    document.body.dataset.signedIn = "yes";
    // Who is signed in decides which controls show; the page waits for it.
    api("GET", "/v1/me").then(function (answer) {
      me = answer;
      $("who").textContent = "signed in as " + me.user + (me.admin ? " (admin)" : "");
    }, function () { me = null; $("who").textContent = ""; }).then(function () {
      showTab("contexts");
      if (live) { live.stop(); }
      live = window.outpostLive(token(), changed);
    });
  }

  function signOut() {
    if (live) { live.stop(); live = null; }
    sessionStorage.removeItem(TOKEN_KEY);
    disconnect("signed out");
    $("app").hidden = true;
    $("sign-out").hidden = true;
    $("who").textContent = "";
    $("sign-in").hidden = false;
    document.body.dataset.signedIn = "no";
  }

  $("sign-in-form").addEventListener("submit", function (event) {
    event.preventDefault();
    $("sign-in-error").hidden = true;
    sessionStorage.setItem(TOKEN_KEY, $("token").value.trim());
    api("GET", "/v1/execution-contexts").then(function () {
      $("token").value = "";
      signedIn();
    }, function (err) {
      sessionStorage.removeItem(TOKEN_KEY);
      showSignInError(err);
    });
  });
  $("sign-out").addEventListener("click", signOut);
  Array.prototype.forEach.call(document.querySelectorAll("#tabs button"), function (b) {
    b.addEventListener("click", function () { showTab(b.dataset.tab); });
  });

  // ---- the terminal ----

  var xterm = window.OutpostXterm;
  var term = null;       // the xterm.js Terminal, made on first use
  var socket = null;     // the viewer WebSocket
  var current = null;    // {terminalId, role}
  var replaying = false; // between `replay` and `live`, and until xterm has drawn the replay
  var decoder = null;

  function terminalAvailable() {
    if (xterm && xterm.Terminal) { return true; }
    var why = xterm && xterm.missing ? xterm.missing : "/ui/xterm.js did not load";
    var box = $("terminal-unavailable");
    box.textContent = "The terminal is unavailable: this server found no xterm.js (" +
      why + "). Install Debian's node-xterm package (apt-get install node-xterm) on the " +
      "server's machine, or start the server with --xterm-dir naming an xterm.js 3.x package " +
      "folder, then reload this page; nothing needs rebuilding.";
    box.hidden = false;
    $("terminal-open").disabled = true;
    $("terminal").hidden = true;
    return false;
  }

  function status(text) { $("terminal-status").textContent = text; }

  function fillContextChoice() {
    var filter = $("runs-context");
    var wanted = filter.value;
    filter.textContent = "";
    var any = document.createElement("option");
    any.value = "";
    any.textContent = "any";
    filter.appendChild(any);
    contexts.forEach(function (c) {
      var option = document.createElement("option");
      option.value = c.name;
      option.textContent = c.name;
      filter.appendChild(option);
    });
    filter.value = wanted;
    var select = $("terminal-context");
    var chosen = select.value;
    select.textContent = "";
    contexts.filter(function (c) { return c.online; }).forEach(function (c) {
      var option = document.createElement("option");
      option.value = c.name;
      option.textContent = c.name;
      select.appendChild(option);
    });
    if (chosen) { select.value = chosen; }
    if (!select.value && select.options.length) { select.selectedIndex = 0; }
  }

  function loadTerminals() {
    return api("GET", "/v1/terminals").then(function (value) {
      // In a cluster, nodes that did not answer: their terminals are not in the list.
      var unreached = (value && value.unreachedNodes) || [];
      var note = $("terminals-unreached");
      note.hidden = unreached.length === 0;
      note.textContent = unreached.length ? "Terminals held by " + unreached.join(", ") +
        " are missing: " + (unreached.length === 1 ? "that node" : "those nodes") +
        " did not answer. Reload to ask again." : "";
      fill("terminals", (value && value.terminals) || [], function (t, row) {
        cell(row, t.terminalId);
        cell(row, t.context);
        cell(row, t.state);
        cell(row, t.viewers);
        cell(row, t.cols + "×" + t.rows);
        var join = buttonCell(row, "Join", function () { joinTerminal(t.terminalId); },
          { terminalId: t.terminalId });
        join.className = "join";
        join.disabled = t.state === "closed" || !terminalAvailable();
      }, "No open terminals.");
    });
  }

  function ensureTerm() {
    if (term) { return term; }
    term = new xterm.Terminal({ cursorBlink: false, scrollback: 1000 });
    term.open($("terminal"));
    xterm.fit.fit(term);
    term.on("data", function (data) {
      // A replay can hold a terminal query; its answer must not go back as input.
      if (replaying || !socket || socket.readyState !== WebSocket.OPEN) { return; }
      if (!current || current.role !== "operator") { return; }
      socket.send(new TextEncoder().encode(data));
    });
    term.on("resize", function (size) { sendResize(size.cols, size.rows); });
    window.addEventListener("resize", function () {
      // A watcher keeps the operator's size; an operator's terminal follows the window.
      if (term && (!current || current.role === "operator")) { xterm.fit.fit(term); }
    });
    return term;
  }

  function terminalShown() {
    if (!terminalAvailable()) { return; }
    ensureTerm();
    xterm.fit.fit(term);
  }

  // The open terminals' list again, when this page's own terminal changed its state or size;
  // a burst (a window dragged wider) reads it once, a quarter of a second after it began.
  var terminalsTimer = null;
  function terminalsChanged() {
    if (document.body.dataset.tab !== "terminal" || terminalsTimer) { return; }
    terminalsTimer = setTimeout(function () {
      terminalsTimer = null;
      loadTerminals().catch(showError);
    }, 250);
  }

  function sendResize(cols, rows) {
    if (!socket || socket.readyState !== WebSocket.OPEN || !current || current.role !== "operator") {
      return;
    }
    socket.send(JSON.stringify({ type: "resize", cols: cols, rows: rows }));
  }

  // Whether xterm.js has parsed everything written to it (3.x writes on a timer).
  function xtermIdle() {
    var core = term && term._core;
    return !core || (!core._writeInProgress && (!core.writeBuffer || core.writeBuffer.length === 0));
  }

  function endReplayWhenDrawn() {
    if (xtermIdle()) { replaying = false; document.body.dataset.terminal = "live"; return; }
    setTimeout(endReplayWhenDrawn, 0);
  }

  function disconnect(why) {
    if (socket) {
      var old = socket;
      socket = null;
      old.onclose = null;
      old.close(1000);
    }
    current = null;
    replaying = false;
    $("terminal-close").disabled = true;
    if (why) { status(why); }
  }

  function connect(terminalId, ticket, role) {
    disconnect();
    stopPlayer();
    ensureTerm();
    term.reset();
    decoder = new TextDecoder("utf-8");
    current = { terminalId: terminalId, role: role || "operator" };
    document.body.dataset.terminal = "connecting";
    var scheme = location.protocol === "https:" ? "wss:" : "ws:";
    var url = scheme + "//" + location.host + "/v1/terminals/" + encodeURIComponent(terminalId) +
      "/connect?ticket=" + encodeURIComponent(ticket);
    var ws = new WebSocket(url);
    ws.binaryType = "arraybuffer";
    socket = ws;
    status("connecting to " + terminalId + "…");
    ws.onmessage = function (event) {
      if (socket !== ws) { return; }
      if (typeof event.data !== "string") {
        term.write(decoder.decode(new Uint8Array(event.data), { stream: true }));
        return;
      }
      var message;
      try { message = JSON.parse(event.data); } catch (e) { return; }
      onMessage(message);
    };
    ws.onclose = function (event) {
      if (socket !== ws) { return; }
      socket = null;
      replaying = false;
      $("terminal-close").disabled = true;
      document.body.dataset.terminal = "closed";
      status("disconnected (" + event.code + (event.reason ? " " + event.reason : "") + ")");
      loadTerminals().catch(showError);
    };
  }

  function onMessage(message) {
    switch (message.type) {
      case "ready":
        current.role = message.role;
        $("terminal-close").disabled = message.role !== "operator";
        status(message.terminalId + " on as " + message.role);
        document.body.dataset.terminal = "ready";
        if (message.role === "operator") {
          xterm.fit.fit(term);
          if (term.cols !== message.cols || term.rows !== message.rows) {
            sendResize(term.cols, term.rows);
          }
        } else {
          term.resize(message.cols, message.rows);
        }
        term.focus();
        break;
      case "replay":
        replaying = true;
        document.body.dataset.terminal = "replay";
        break;
      case "live":
        endReplayWhenDrawn();
        terminalsChanged();
        break;
      case "resized":
        if (current && current.role !== "operator") { term.resize(message.cols, message.rows); }
        terminalsChanged();
        break;
      case "exit":
        status("the program ended" +
          (typeof message.exitCode === "number" ? " with exit code " + message.exitCode : ""));
        break;
      case "closed":
        status("closed: " + message.reason);
        break;
      case "error":
        status("error " + message.code + ": " + message.message);
        break;
      default:
        break;
    }
  }

  function openTerminal() {
    if (!terminalAvailable()) { return; }
    var name = $("terminal-context").value;
    if (!name) { status("no context is online"); return; }
    ensureTerm();
    xterm.fit.fit(term);
    api("POST", "/v1/execution-contexts/" + encodeURIComponent(name) + "/terminals",
      { cols: term.cols, rows: term.rows }).then(function (opened) {
      connect(opened.terminalId, opened.ticket, opened.role || "operator");
      loadTerminals().catch(showError);
    }, showError);
  }

  function joinTerminal(terminalId) {
    if (!terminalAvailable()) { return; }
    api("POST", "/v1/terminals/" + encodeURIComponent(terminalId) + "/tickets").then(function (t) {
      connect(terminalId, t.ticket, t.role);
    }, showError);
  }

  $("terminal-open").addEventListener("click", openTerminal);
  $("terminal-close").addEventListener("click", function () {
    if (socket && socket.readyState === WebSocket.OPEN) {
      socket.send(JSON.stringify({ type: "close" }));
    }
  });

  // ---- recordings: listed, and played over the same xterm.js ----

  function loadRecordings() {
    return api("GET", "/v1/recordings?limit=50").then(function (value) {
      fill("recordings", (value && value.recordings) || [], function (r, row) {
        cell(row, r.terminalId);
        cell(row, r.context);
        cell(row, r.openedBy);
        cell(row, when(r.startedAt));
        cell(row, typeof r.endedAt === "number" ? (r.endedAt - r.startedAt) + " s"
          : "open or cut short");
        cell(row, r.size + " B" + (r.truncated ? " (truncated)" : ""));
        var play = buttonCell(row, "Play", function () { playRecording(r.terminalId); },
          { terminalId: r.terminalId });
        play.className = "play";
        play.disabled = !terminalAvailable();
      }, "No recorded sessions yet.");
    });
  }

  // The recording being played: its output events ([seconds, text]) and resizes, where it
  // is, and the speed; positions are seconds into the recording.
  var player = null;

  function parseCast(text) {
    var lines = text.split("\n").filter(function (l) { return l.trim() !== ""; });
    var header = JSON.parse(lines.shift());
    var events = lines.map(function (l) { return JSON.parse(l); }).filter(function (e) {
      return e[1] === "o" || e[1] === "r";
    });
    return { header: header, events: events };
  }

  function playRecording(terminalId) {
    if (!terminalAvailable()) { return; }
    fetch("/v1/terminals/" + encodeURIComponent(terminalId) + "/recording", {
      headers: { "Authorization": "Bearer " + token() }
    }).then(function (response) {
      if (!response.ok) { throw { status: response.status, code: "recording_unknown",
        message: "the recording could not be read (HTTP " + response.status + ")" }; }
      return response.text();
    }).then(function (text) {
      disconnect("playing the recording of " + terminalId);
      stopPlayer();
      var cast = parseCast(text);
      ensureTerm();
      var last = cast.events.length ? cast.events[cast.events.length - 1][0] : 0;
      player = { id: terminalId, cast: cast, index: 0, position: 0, duration: last,
        speed: Number($("player-speed").value) || 1, paused: false, timer: null,
        wallStart: 0, posStart: 0 };
      $("player-controls").hidden = false;
      $("player-pause").textContent = "Pause";
      seekTo(0);
      resume();
    }, showError);
  }

  // Draws everything up to `position` at once (a seek), from a reset terminal.
  function seekTo(position) {
    var p = player;
    term.reset();
    term.resize(p.cast.header.width, p.cast.header.height);
    p.index = 0;
    while (p.index < p.cast.events.length && p.cast.events[p.index][0] <= position) {
      apply(p.cast.events[p.index]);
      p.index++;
    }
    p.position = position;
    showPosition();
  }

  function apply(event) {
    if (event[1] === "o") { term.write(event[2]); return; }
    var size = String(event[2]).split("x");
    term.resize(Number(size[0]) || term.cols, Number(size[1]) || term.rows);
  }

  function resume() {
    var p = player;
    p.paused = false;
    p.wallStart = performance.now();
    p.posStart = p.position;
    step();
  }

  function step() {
    var p = player;
    if (!p || p.paused) { return; }
    p.position = p.posStart + (performance.now() - p.wallStart) / 1000 * p.speed;
    while (p.index < p.cast.events.length && p.cast.events[p.index][0] <= p.position) {
      apply(p.cast.events[p.index]);
      p.index++;
    }
    showPosition();
    if (p.index >= p.cast.events.length) {
      p.position = p.duration;
      p.paused = true;
      $("player-pause").textContent = "Play again";
      document.body.dataset.player = "done";
      showPosition();
      return;
    }
    document.body.dataset.player = "playing";
    var next = (p.cast.events[p.index][0] - p.position) / p.speed * 1000;
    p.timer = setTimeout(step, Math.max(0, Math.min(next, 250)));
  }

  function pause() {
    var p = player;
    p.paused = true;
    clearTimeout(p.timer);
    document.body.dataset.player = "paused";
  }

  function stopPlayer() {
    if (player) { clearTimeout(player.timer); }
    player = null;
    $("player-controls").hidden = true;
    delete document.body.dataset.player;
  }

  function showPosition() {
    var p = player;
    $("player-time").textContent = p.position.toFixed(1) + " / " + p.duration.toFixed(1) + " s";
    $("player-seek").value = p.duration > 0 ? Math.round(p.position / p.duration * 1000) : 1000;
  }

  $("player-pause").addEventListener("click", function () {
    if (!player) { return; }
    if (!player.paused) { pause(); return; }
    if (player.index >= player.cast.events.length) { seekTo(0); }
    $("player-pause").textContent = "Pause";
    resume();
  });
  $("player-speed").addEventListener("change", function () {
    if (!player) { return; }
    var wasPaused = player.paused;
    pause();
    player.speed = Number($("player-speed").value) || 1;
    if (!wasPaused) { resume(); }
  });
  $("player-seek").addEventListener("input", function () {
    if (!player) { return; }
    var wasPaused = player.paused;
    pause();
    seekTo(player.duration * Number($("player-seek").value) / 1000);
    if (!wasPaused) { resume(); }
  });
  $("player-stop").addEventListener("click", function () {
    stopPlayer();
    status("");
  });

  // The player's state, for people and for tests.
  window.outpostPlayer = function () {
    if (!player) { return null; }
    return { terminalId: player.id, position: player.position, duration: player.duration,
      paused: player.paused, done: player.index >= player.cast.events.length };
  };

  // Reads the terminal's screen as text (one string per row), for people and for tests.
  window.outpostScreen = function () {
    if (!term) { return []; }
    var buffer = term._core.buffer;
    var out = [];
    for (var y = 0; y < term.rows; y++) {
      out.push(buffer.translateBufferLineToString(buffer.ydisp + y, true));
    }
    return out;
  };

  // The terminal's size and this viewer's role, for people and for tests.
  window.outpostTerminal = function () {
    if (!term) { return null; }
    return { cols: term.cols, rows: term.rows, role: current ? current.role : null };
  };

  if (token()) { signedIn(); } else { document.body.dataset.signedIn = "no"; }
}());
