// The console's page of one context: its state and what a run there can see, the daemon card
// (pause, resume, restart, update now, recent log lines: each a request from afar the
// machine's owner may refuse), the grant with its editor, sharing, and its recent runs.
//
// It only renders what the API answers and sends what a person asked for; whether someone may
// change the grant or ask the daemon is the server's decision (the controls show for the
// context's operator and admins, and the server refuses anyone else anyway). app.js hands it
// its helpers through `window.outpostPages.context(ui)`.
(function () {
  "use strict";

  window.outpostPages = window.outpostPages || {};

  window.outpostPages.context = function (ui) {
    var $ = ui.$;
    var shown = null; // the Context shown, as the API answered it ({id} while it loads)
    var editorVersion = null; // the grant version the editor was filled from
    var dirty = false; // the editor holds changes not saved yet

    function path(suffix) {
      return "/v1/execution-contexts/" + encodeURIComponent(shown.id) + (suffix || "");
    }

    function stateText(c) {
      if (c.revoked) { return "revoked"; }
      if (!c.online) { return "offline"; }
      if (c.paused) { return "online, paused by an operator (takes no new runs until resumed)"; }
      if (c.draining) { return "online, draining (takes no new runs; stopping or restarting)"; }
      return "online, taking runs";
    }

    function mayManage(c) {
      var me = ui.me();
      return !!me && (me.admin || me.user === c.operator) && !c.revoked;
    }

    // The folders the operator's runs see (a shared run sees none), or why they are not shown.
    function foldersText(c) {
      if (!c.online) { return "unknown while offline"; }
      if (!mayManage(c)) { return "shown to its operator and admins"; }
      if (!c.sandbox || !c.sandbox.mounts) {
        return "not announced by its daemon (an older daemon, or its grant not applied yet)";
      }
      var listed = c.sandbox.mounts.map(function (m) { return m.path + " (" + m.mode + ")"; });
      if (!listed.length) { return "none (the grant and the owner's policy share no folder)"; }
      return listed.join(", ") + (listed.length >= 64 ? ", … (the first 64)" : "") +
        "; shared runs see none";
    }

    // ---- the daemon card ----

    function showDaemon(c) {
      $("daemon-state").textContent = stateText(c) +
        (c.online && !c.control ? "; its daemon takes no requests from afar (update it)" : "");
      var usable = mayManage(c) && c.online && c.control;
      $("daemon-controls").hidden = !mayManage(c);
      Array.prototype.forEach.call(document.querySelectorAll("#daemon-controls button"),
        function (b) { b.disabled = !usable; });
      if (usable) {
        $("daemon-pause").disabled = !!c.paused;
        $("daemon-resume").disabled = !c.paused;
      }
    }

    function ask(action, extra) {
      if (!shown) { return Promise.resolve(); }
      var body = { action: action };
      if (extra) { Object.keys(extra).forEach(function (k) { body[k] = extra[k]; }); }
      $("daemon-answer").textContent = action + ": asking the daemon…";
      document.body.dataset.daemonAnswer = "waiting";
      return ui.api("POST", path("/daemon"), body)
        .then(function (a) {
          $("daemon-answer").textContent = a.action + " " + a.outcome + ": " + a.message +
            (a.code ? " [" + a.code + "]" : "");
          document.body.dataset.daemonAnswer = a.action + ":" + a.outcome;
          if (a.action === "logs" && a.outcome === "done") {
            $("daemon-logs").textContent = (a.lines || []).join("\n");
            $("daemon-logs").hidden = false;
          }
          return refresh();
        }, function (err) {
          $("daemon-answer").textContent = action + " failed: " + ui.describe(err);
          document.body.dataset.daemonAnswer = action + ":" + err.code;
        });
    }

    $("daemon-pause").addEventListener("click", function () { ask("pause"); });
    $("daemon-resume").addEventListener("click", function () { ask("resume"); });
    $("daemon-restart").addEventListener("click", function () { ask("restart"); });
    $("daemon-update").addEventListener("click", function () { ask("update"); });
    $("daemon-logs-button").addEventListener("click", function () { ask("logs", { lines: 100 }); });

    // ---- the grant and its editor ----

    function fillEditor(c) {
      var g = c.grant || {};
      $("grant-folders").value = (g.fs || []).map(function (f) {
        return f.path + " " + f.mode;
      }).join("\n");
      var egress = g.egress || { mode: "none" };
      $("grant-egress").value = egress.mode || "none";
      $("grant-hosts").value = (egress.hosts || []).join(", ");
      $("grant-hosts").disabled = egress.mode !== "allowlist";
      var on = !!(g.commands && g.commands.enabled);
      $("grant-commands").checked = on;
      // Only the machine turns host commands on (`outpost context commands on` there).
      $("grant-commands").disabled = !on;
      $("grant-commands-note").textContent = on
        ? "untick to turn them off"
        : "off; only the machine turns them on (outpost context commands on)";
      $("grant-max").value = (g.limits && g.limits.maxConcurrent) || 1;
      editorVersion = c.grantVersion;
      dirty = false;
    }

    // Refills the editor from the grant in force, unless it holds edits not saved yet (a
    // list refreshing itself must not throw them away); says so when the grant changed
    // under them.
    function showEditor(c) {
      $("grant-editor").hidden = !mayManage(c);
      if (!dirty) {
        fillEditor(c);
      } else if (c.grantVersion !== editorVersion) {
        $("grant-answer").textContent = "the grant changed to version " + c.grantVersion +
          " meanwhile; saving replaces it with what the editor shows";
      }
    }

    $("grant-editor").addEventListener("input", function () { dirty = true; });

    // The grant the editor says, or throws a sentence saying what to fix.
    function editedGrant() {
      var fs = [];
      $("grant-folders").value.split("\n").forEach(function (line, i) {
        var text = line.trim();
        if (!text) { return; }
        var m = /^(\S.*?)\s+(ro|rw)$/.exec(text);
        if (!m) { throw "folder line " + (i + 1) + " must be PATH ro or PATH rw"; }
        fs.push({ path: m[1], mode: m[2] });
      });
      var mode = $("grant-egress").value;
      var egress = { mode: mode };
      if (mode === "allowlist") {
        egress.hosts = $("grant-hosts").value.split(",").map(function (h) { return h.trim(); })
          .filter(function (h) { return h; });
        if (!egress.hosts.length) { throw "an allowlist needs at least one HOST:PORT"; }
      }
      var max = parseInt($("grant-max").value, 10);
      if (!(max >= 1 && max <= 8)) { throw "at most 1 to 8 runs at once"; }
      var grant = {
        fs: fs,
        egress: egress,
        commands: { enabled: $("grant-commands").checked },
        limits: { maxConcurrent: max }
      };
      if (shown && shown.grant && shown.grant.environments) {
        grant.environments = shown.grant.environments;
      }
      return grant;
    }

    $("grant-egress").addEventListener("change", function () {
      $("grant-hosts").disabled = $("grant-egress").value !== "allowlist";
    });

    $("grant-editor").addEventListener("submit", function (event) {
      event.preventDefault();
      if (!shown) { return; }
      var grant;
      try { grant = editedGrant(); } catch (why) {
        $("grant-answer").textContent = "not saved: " + why;
        document.body.dataset.grantAnswer = "invalid";
        return;
      }
      $("grant-answer").textContent = "saving…";
      ui.api("PATCH", path("/grant"), grant)
        .then(function (c) {
          dirty = false;
          $("grant-answer").textContent = "saved: version " + c.grantVersion +
            " is in force and was sent to the daemon";
          document.body.dataset.grantAnswer = "saved:" + c.grantVersion;
          render(c);
        }, function (err) {
          $("grant-answer").textContent = "not saved: " + ui.describe(err);
          document.body.dataset.grantAnswer = err.code;
        });
    });

    // ---- the page ----

    function render(c) {
      shown = c;
      var body = $("context-facts").tBodies[0];
      body.textContent = "";
      ui.fact(body, "Context", c.name + " (" + c.id + ")");
      ui.fact(body, "State", stateText(c) + (c.daemonVersion ? "; daemon " + c.daemonVersion : ""));
      ui.fact(body, "Operator", c.operator + (c.operatorIsMember === false ? " (no longer a member)" : ""));
      ui.fact(body, "Online since", c.online && c.onlineSince ? ui.when(c.onlineSince) : "offline");
      ui.fact(body, "Registered", ui.when(c.registeredAt));
      ui.fact(body, "Slots", c.slotsUsed + " of " + c.slotsTotal + " in use");
      ui.fact(body, "Environments", (c.environments || []).join(", ") || "none announced");
      ui.fact(body, "Sandbox", ui.sandboxSummary(c.sandbox));
      // Where the grant and the owner's local policy meet, as the daemon says it now.
      ui.fact(body, "Folders the operator's runs see", foldersText(c));
      ui.fact(body, "Grant", ui.grantSummary(c.grant) + " (version " + c.grantVersion + ")");
      ui.fact(body, "Recordings", c.online ? (c.recordsTerminalInput
        ? "terminal output and what operators type (its owner allows it)"
        : "terminal output only, never what operators type") : "");
      ui.fact(body, "Shared", c.sharedWithAllMembers
        ? "with every member" + ((c.optedIn || []).length ? "; opted in: " + c.optedIn.join(", ") : "")
        : "with nobody: only its operator runs here");
      showDaemon(c);
      showEditor(c);
    }

    function refresh() {
      if (!shown) { return Promise.resolve(); }
      var id = shown.id;
      return Promise.all([
        ui.api("GET", path()),
        ui.api("GET", "/v1/runs?limit=10&context=" + encodeURIComponent(id))
      ]).then(function (got) {
        if (!shown || shown.id !== id) { return; }
        render(got[0]);
        ui.fill("context-runs", (got[1] && got[1].runs) || [], function (r, row) {
          ui.buttonCell(row, r.executionId, function () { ui.openRun(r.executionId); }, null, "id");
          ui.cell(row, r.status + (typeof r.exitCode === "number" ? " (exit " + r.exitCode + ")" : ""));
          ui.cell(row, r.requester || "");
          ui.cell(row, ui.when(r.createdAt));
          ui.cell(row, ui.took(r.timing));
        }, "No runs here yet.");
      });
    }

    return {
      // By the context's id: a name could mean another operator's context.
      show: function (id) {
        shown = { id: id };
        dirty = false;
        editorVersion = null;
        $("grant-answer").textContent = "";
        $("daemon-answer").textContent = "";
        $("daemon-logs").hidden = true;
        $("daemon-logs").textContent = "";
        delete document.body.dataset.daemonAnswer;
        delete document.body.dataset.grantAnswer;
        return refresh();
      },
      refresh: refresh,
      leave: function () { shown = null; },
      name: function () { return shown && shown.id; }
    };
  };
})();
