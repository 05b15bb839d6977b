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

  function loadContexts() {
    return api("GET", "/v1/execution-contexts").then(function (value) {
      contexts = (value && value.contexts) || [];
      fill("contexts", contexts, function (c, row) {
        cell(row, c.name);
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

  function loadRuns() {
    return api("GET", "/v1/runs").then(function (value) {
      fill("runs", (value && value.runs) || [], function (r, row) {
        cell(row, r.executionId);
        var status = r.status;
        if (typeof r.exitCode === "number") { status += " (exit " + r.exitCode + ")"; }
        if (r.error) { status += " (" + r.error.code + ")"; }
        cell(row, status);
        cell(row, r.ranOnText || "");
        cell(row, when(r.createdAt));
        var t = r.timing;
        cell(row, t ? t.serverMs + " ms (ran " + t.executeMs + " ms)" : "");
      }, "No runs yet.");
    });
  }

  function loadAudit() {
    return api("GET", "/v1/audit").then(function (value) {
      fill("audit", (value && value.events) || [], function (e, row) {
        cell(row, when(e.at));
        cell(row, e.kind);
        cell(row, e.actor);
        cell(row, e.contextName ? e.contextName + " (" + e.contextId + ")" : e.contextId || "");
        cell(row, e.detail || "");
      }, "Nothing audited yet.");
    });
  }

  var loaders = {
    contexts: loadContexts,
    runs: loadRuns,
    audit: loadAudit,
    terminal: function () { return loadContexts().then(loadTerminals); }
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
    showTab("contexts");
  }

  function signOut() {
    sessionStorage.removeItem(TOKEN_KEY);
    disconnect("signed out");
    $("app").hidden = true;
    $("sign-out").hidden = true;
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
    return false;
  }

  function status(text) { $("terminal-status").textContent = text; }

  function fillContextChoice() {
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
      fill("terminals", (value && value.terminals) || [], function (t, row) {
        cell(row, t.terminalId);
        cell(row, t.context);
        cell(row, t.state);
        cell(row, t.viewers);
        cell(row, t.cols + "×" + t.rows);
        var join = document.createElement("button");
        join.type = "button";
        join.textContent = "Join";
        join.className = "join";
        join.dataset.terminalId = t.terminalId;
        join.disabled = t.state === "closed" || !terminalAvailable();
        join.addEventListener("click", function () { joinTerminal(t.terminalId); });
        cell(row, "").appendChild(join);
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
        break;
      case "resized":
        if (current && current.role !== "operator") { term.resize(message.cols, message.rows); }
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
