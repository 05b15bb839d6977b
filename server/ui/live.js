// Lists that refresh themselves: the console keeps one `GET /v1/events` stream open (Server-
// Sent Events read through fetch, which can carry the token) and, when it says a list changed,
// reads the list that is on screen again — at most one read per list at a time, the last
// change never lost. A stream that ends is opened again after a pause that doubles up to 30 s,
// and what is on screen is read again then (changes may have been missed meanwhile).
//
// It never renders anything itself: app.js hands it `changed(topic)`, which knows what is
// shown. `document.body.dataset.live` says whether the stream is open (`on`) or not (`off`).
(function () {
  "use strict";

  window.outpostLive = function (token, changed) {
    var abort = null;
    var stopped = false;
    var pause = 1000;
    var busy = {};    // topic -> a read is under way
    var again = {};   // topic -> changed again while it was read

    function refresh(topic) {
      if (busy[topic]) { again[topic] = true; return; }
      busy[topic] = true;
      Promise.resolve(changed(topic)).catch(function () {}).then(function () {
        busy[topic] = false;
        if (again[topic]) { again[topic] = false; refresh(topic); }
      });
    }

    function onEvent(text) {
      var name = "message";
      var data = "";
      text.split("\n").forEach(function (line) {
        if (line.indexOf("event:") === 0) { name = line.slice(6).trim(); }
        if (line.indexOf("data:") === 0) { data += line.slice(5).trim(); }
      });
      if (name === "ready") {
        document.body.dataset.live = "on";
        pause = 1000;
        ["contexts", "runs", "audit"].forEach(refresh);
      } else if (name === "change") {
        try { refresh(JSON.parse(data).topic); } catch (e) { /* not a change we know */ }
        // How many changes were taken (the browser tests' way to know one was looked at).
        document.body.dataset.changes = String((parseInt(document.body.dataset.changes, 10) || 0) + 1);
      }
    }

    function open() {
      if (stopped) { return; }
      abort = new AbortController();
      fetch("/v1/events", {
        headers: { "Authorization": "Bearer " + token, "Accept": "text/event-stream" },
        signal: abort.signal
      }).then(function (response) {
        if (!response.ok || !response.body) { throw new Error("status " + response.status); }
        var reader = response.body.getReader();
        var decoder = new TextDecoder();
        var pending = "";
        function pump() {
          return reader.read().then(function (chunk) {
            if (chunk.done) { return; }
            pending += decoder.decode(chunk.value, { stream: true });
            var end;
            while ((end = pending.indexOf("\n\n")) >= 0) {
              onEvent(pending.slice(0, end));
              pending = pending.slice(end + 2);
            }
            return pump();
          });
        }
        return pump();
      }).catch(function () { /* closed or refused: opened again below */ }).then(function () {
        document.body.dataset.live = "off";
        if (stopped) { return; }
        setTimeout(open, pause);
        pause = Math.min(pause * 2, 30000);
      });
    }

    open();
    return {
      stop: function () {
        stopped = true;
        if (abort) { abort.abort(); }
        document.body.dataset.live = "off";
      }
    };
  };
})();
