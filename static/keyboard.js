/* Keyboard shortcuts for the item workspace, the live diff of the text editor, and small toggles; also the
 * lease's countdown, the find boxes of the members list and the projects page, the Copy buttons of set-password
 * links, and what a failed htmx request says (the server's reason).
 *
 * The page declares its shortcuts in HTML: an element with data-shortcut="k" (several keys separated by
 * spaces) is clicked (buttons, links, radios, checkboxes) or focused (text fields) when k is pressed outside a
 * text field. Keys resolve inside the nearest [data-shortcut-scope] around the focused element first, so digits
 * toggle the documents of the query being worked on. data-focus="#id" moves focus after the action; a
 * shortcut inside a closed <details> opens it. Without this file the page still works: every shortcut is a
 * real form control or link.
 */
(function () {
  "use strict";

  var TEXT_TYPES = /^(text|search|email|url|tel|number|password|date|time|datetime-local)$/;

  function isTyping(el) {
    if (!el || !el.tagName) return false;
    if (el.isContentEditable || el.tagName === "TEXTAREA" || el.tagName === "SELECT") return true;
    return el.tagName === "INPUT" && TEXT_TYPES.test(el.type || "text");
  }

  function workspace() {
    return document.getElementById("workspace");
  }

  function submitForm(form) {
    if (!form) return;
    if (!checkRelevance(form)) return;
    if (form.requestSubmit) form.requestSubmit();
    else form.submit();
  }

  function find(root, key) {
    var selector = '[data-shortcut~="' + (window.CSS && CSS.escape ? CSS.escape(key) : key) + '"]';
    return root.querySelector(selector);
  }

  function activate(el) {
    var details = el.closest("details");
    // A <summary> shortcut toggles its own <details> by the click below; opening it first would undo that.
    if (details && !details.open && el.tagName !== "SUMMARY") details.open = true;
    if (isTyping(el)) {
      el.focus();
      if (el.select && el.tagName === "INPUT") el.select();
    } else {
      el.click();
      el.focus();
    }
    if (el.dataset.check) {
      var other = document.querySelector(el.dataset.check);
      if (other) other.checked = true;
    }
    if (el.dataset.focus) {
      var next = document.querySelector(el.dataset.focus);
      if (next) next.focus();
    }
  }

  // Type-ahead: keys pressed while the workspace waits for the next item (a submit, skip, back or undo in flight)
  // are kept and pressed again once it has come, so "1 Enter 2 Enter" typed at speed answers two items. Before,
  // the "2" picked an option in the form already sent and the second Enter was dropped. The keys are kept only
  // when another item came (after a refused answer they are dropped, the error shown), and an Enter before any
  // other key is not replayed: pressed twice, Enter submits once and never answers an item not yet seen.
  // An adjudication's next screen is the same item adjudicated (data-type-ahead-same-item): "1 n" picks the
  // first answer and goes on to the next disagreement.
  // The text field a submit was sent from loses the focus, so what is typed next waits too ("s", a reason,
  // Enter, then "1 Enter" for the next item); keys typed into a text field focused meanwhile stay in it.
  var MAX_TYPED_AHEAD = 32;
  var SAY_TYPED_AFTER_MS = 400;  // an item comes in about 50 ms: said only when the wait is long enough to wonder
  var waiting = null;  // {xhr, item, workspace, keys, timer}

  // What waits (or was not used), said at the foot of the window: `#typed-ahead`, made when first needed.
  function sayTyped(keys, text) {
    var note = document.getElementById("typed-ahead");
    if (!keys || !keys.length) {
      if (note) note.hidden = true;
      return;
    }
    if (!note) {
      note = document.createElement("p");
      note.id = "typed-ahead";
      note.className = "typed-ahead";
      note.setAttribute("role", "status");
      document.body.appendChild(note);
    }
    var names = keys.map(function (key) {
      return { " ": "Space", ArrowLeft: "\u2190", ArrowRight: "\u2192" }[key] || key;
    });
    note.textContent = text.replace("%s", names.join(" "));
    note.hidden = false;
  }
  function sayWaiting() {
    if (waiting) sayTyped(waiting.keys, "Typed ahead: %s, for the next item, which is on its way");
  }
  ["keydown", "pointerdown"].forEach(function (type) {  // a note of keys not used goes at the next action
    document.addEventListener(type, function () { if (!waiting) sayTyped(null); }, true);
  });

  // A key pressed again by script does not type: into a text field a replayed shortcut focused ("s" then a skip
  // reason, "1" then a plan's outcome) the characters are put as typing puts them, replacing what the shortcut
  // selected; Enter submits a one-line field's form and starts a line in a box of lines.
  function typeInto(field, keys) {
    if (keys[0] === "Enter") {
      if (field.tagName === "TEXTAREA" && !("multiline" in field.dataset)) return false;  // the handler submits
      keys.shift();
      if (field.tagName === "TEXTAREA") insertText(field, "\n");
      else if (field.form && checkRelevance(field.form)) field.form.requestSubmit();
      return true;
    }
    var text = "";
    while (keys.length && keys[0].length === 1) text += keys.shift();
    if (!text) return false;
    insertText(field, text);
    return true;
  }

  function insertText(field, text) {
    try {
      field.setRangeText(text, field.selectionStart, field.selectionEnd, "end");
    } catch (error) {  // a number field has no selection to replace: the shortcut selected all of it
      field.value = text;
    }
    field.dispatchEvent(new InputEvent("input", { bubbles: true, data: text, inputType: "insertText" }));
  }

  function replayKeys(keys) {
    while (keys.length && keys[0] === "Enter") keys.shift();
    while (keys.length) {
      if (waiting) {  // a replayed key sent the workspace again: the rest waits for that one
        waiting.keys = waiting.keys.concat(keys);
        return;
      }
      var target = document.activeElement || document.body;
      if (isTyping(target) && typeInto(target, keys)) continue;
      target.dispatchEvent(new KeyboardEvent("keydown", { key: keys.shift(), bubbles: true, cancelable: true }));
    }
  }

  document.addEventListener("htmx:beforeRequest", function (event) {
    var target = event.detail.target;
    if (target && target.id === "workspace" && target.dataset.item) {
      waiting = { xhr: event.detail.xhr, item: target.dataset.item, workspace: target, keys: [],
                  timer: setTimeout(sayWaiting, SAY_TYPED_AFTER_MS) };
      // What was typed in a box is on its way with its form: the keys after it are for the next item.
      if (isTyping(document.activeElement) && target.contains(document.activeElement)) document.activeElement.blur();
    }
  });
  document.addEventListener("htmx:afterRequest", function (event) {
    if (!waiting || event.detail.xhr !== waiting.xhr) return;
    var done = waiting;
    waiting = null;
    clearTimeout(done.timer);
    sayTyped(null);
    var ws = workspace();
    var came = ws && ws !== done.workspace && ws.dataset.item
      && (ws.dataset.item !== done.item || "typeAheadSameItem" in ws.dataset);
    if (event.detail.successful && came) {
      replayKeys(done.keys);  // htmx has swapped and settled it by now (no swap or settle delay)
    } else if (done.keys.length) {
      sayTyped(done.keys, "Not used: %s, typed while waiting (no other item came)");
    }
  });
  document.addEventListener("keydown", function (event) {
    if (!waiting || event.ctrlKey || event.metaKey || event.altKey || event.isComposing || isTyping(event.target)
        || !(event.key.length === 1 || /^(Enter|ArrowLeft|ArrowRight)$/.test(event.key))) return;
    event.preventDefault();
    event.stopImmediatePropagation();
    if (event.key === "Enter" && !waiting.keys.length) return;  // Enter again: the item sent is on its way
    if (waiting.keys.length < MAX_TYPED_AHEAD) waiting.keys.push(event.key);
    var note = document.getElementById("typed-ahead");
    if (note && !note.hidden) sayWaiting();  // already said: kept up to date
  }, true);

  // A page without a workspace (the settings) has plain keys only, such as / to find: Enter keeps its meaning.
  function pageShortcut(event) {
    if (event.key === "Enter" || event.ctrlKey || event.metaKey || event.altKey || isTyping(event.target)) return;
    var el = find(document, event.key);
    if (!el) return;
    event.preventDefault();
    activate(el);
  }

  // A table with data-row-keys (the item list): j and k move a highlighted row, o or Enter opens its first link.
  // Registered before the handler below, which leaves alone a key this one took.
  document.addEventListener("keydown", function (event) {
    var table = document.querySelector("table[data-row-keys]");
    if (!table || event.defaultPrevented || event.isComposing || event.ctrlKey || event.metaKey || event.altKey
        || isTyping(event.target) || !table.tBodies.length) return;
    var rows = Array.prototype.slice.call(table.tBodies[0].rows);
    var current = table.querySelector("tbody tr.is-current");
    if ((event.key === "j" || event.key === "k") && rows.length) {
      var index = rows.indexOf(current);  // -1 before the first move: j and k both start at the top
      index = event.key === "j" ? Math.min(rows.length - 1, index + 1) : Math.max(0, index - 1);
      if (current) {
        current.classList.remove("is-current");
        current.removeAttribute("aria-current");
      }
      rows[index].classList.add("is-current");
      rows[index].setAttribute("aria-current", "true");
      rows[index].scrollIntoView({ block: "nearest" });
      event.preventDefault();
    } else if ((event.key === "o" || event.key === "Enter") && current
               && !/^(A|BUTTON|SUMMARY)$/.test(event.target.tagName)) {
      var link = current.querySelector("a[href]");
      if (link) {
        event.preventDefault();
        link.click();
      }
    }
  });

  document.addEventListener("keydown", function (event) {
    if (event.defaultPrevented || event.isComposing) return;
    var ws = workspace();
    if (!ws) return pageShortcut(event);
    var target = event.target;

    if (event.key === "Enter") {
      if (target.tagName === "TEXTAREA" && "multiline" in target.dataset) {
        // A box of lines (JSON inputs): Enter starts a line, Ctrl+Enter (Cmd+Enter) submits.
        if (event.ctrlKey || event.metaKey) { event.preventDefault(); submitForm(target.form); }
        return;
      }
      if (event.altKey || event.shiftKey && target.tagName === "TEXTAREA") return;
      if (target.tagName === "TEXTAREA") {
        event.preventDefault();
        submitForm(target.form);
        return;
      }
      if (isTyping(target)) {
        // A text field: the browser's implicit submission submits its own form (skip reason, an outcome).
        if (target.form && !checkRelevance(target.form)) event.preventDefault();
        return;
      }
      if (/^(BUTTON|A|SUMMARY)$/.test(target.tagName)) return;
      event.preventDefault();
      submitForm((target.form && ws.contains(target.form) && target.form) || ws.querySelector("[data-target-form]"));
      return;
    }
    if (event.key === "Escape" && isTyping(target)) {
      target.blur();
      return;
    }
    if (event.ctrlKey || event.metaKey || event.altKey || isTyping(target)) return;

    var scope = (target.closest && target.closest("[data-shortcut-scope]")) || ws;
    if (event.key === "q" && ws.querySelector("[data-shortcut-scope]")) {
      // Next query (relevance): focus the first document of the following group, wrapping around.
      var scopes = Array.prototype.slice.call(ws.querySelectorAll("[data-shortcut-scope]"));
      var next = scopes[(scopes.indexOf(scope) + 1) % scopes.length];
      var first = next && next.querySelector("input");
      if (first) { event.preventDefault(); first.focus(); }
      return;
    }
    if (/^[0-9]$/.test(event.key)) return numberKey(event, scope, ws);
    var el = find(scope, event.key) || (scope !== ws && find(ws, event.key));
    if (!el) return;
    event.preventDefault();
    activate(el);
  });

  // Options past the ninth have keys of two digits (or more), typed one after the other. A digit that begins a
  // longer key waits for the next one (NEXT_DIGIT_MS, or until any other key) before it picks; a digit that
  // begins none picks at once, so a list of nine options or fewer is as quick as ever. The option waiting to be
  // picked is marked (.key-pending).
  var NEXT_DIGIT_MS = 700;
  var typedDigits = null;  // {digits, scope, el, timer}

  function keysIn(root) {
    var keys = [];
    root.querySelectorAll("[data-shortcut]").forEach(function (el) {
      el.dataset.shortcut.split(/\s+/).forEach(function (key) {
        if (/^[0-9]+$/.test(key)) keys.push(key);
      });
    });
    return keys;
  }

  function beginsKey(root, digits) {
    return keysIn(root).some(function (key) { return key.indexOf(digits) === 0; });
  }

  function beginsLongerKey(root, digits) {
    return keysIn(root).some(function (key) { return key.length > digits.length && key.indexOf(digits) === 0; });
  }

  function markPending(el, on) {
    var mark = el && (el.closest("label") || el);
    if (mark) mark.classList.toggle("key-pending", on);
  }

  function dropDigits() {
    var pending = typedDigits;
    typedDigits = null;
    if (pending) {
      clearTimeout(pending.timer);
      markPending(pending.el, false);
    }
    return pending;
  }

  // Pick the option the digits typed so far name, if any: its wait is over.
  function settleDigits() {
    var pending = dropDigits();
    if (pending && pending.el && pending.el.isConnected) activate(pending.el);  // not if htmx swapped the item
  }

  function numberKey(event, scope, ws) {
    var before = typedDigits && typedDigits.scope === scope ? typedDigits.digits : "";
    var digits = before + event.key;
    if (before && !beginsKey(scope, digits) && !(scope !== ws && beginsKey(ws, digits))) {
      // No key goes on like this: the digits before stand alone, and this one starts afresh, unless picking
      // moved the focus into a text field (a plan's outcome), where the digit is typed.
      settleDigits();
      if (isTyping(document.activeElement)) return;
      digits = event.key;
    } else if (typedDigits && before) {
      dropDigits();
    } else {
      settleDigits();  // typed in another query's documents
    }
    var root = scope !== ws && !beginsKey(scope, digits) ? ws : scope;
    var el = find(root, digits);
    if (beginsLongerKey(root, digits)) {
      event.preventDefault();
      typedDigits = { digits: digits, scope: scope, el: el, timer: setTimeout(settleDigits, NEXT_DIGIT_MS) };
      markPending(el, true);
    } else if (el) {
      event.preventDefault();
      activate(el);
    }
  }

  // A click while digits wait is the reviewer's choice instead.
  document.addEventListener("pointerdown", dropDigits, true);

  // Any other key first settles digits still waiting ("1" then Enter picks the first option and submits it);
  // Escape drops them.
  document.addEventListener("keydown", function (event) {
    if (!typedDigits || /^[0-9]$/.test(event.key) || /^(Shift|Control|Alt|Meta|CapsLock)$/.test(event.key)) return;
    if (event.key === "Escape") dropDigits();
    else settleDigits();
  }, true);

  // Relevance: every query needs at least one relevant document; say which one before the server does.
  function checkRelevance(form) {
    var ok = true;
    form.querySelectorAll("[data-needs-one]").forEach(function (fieldset) {
      var missing = !fieldset.querySelector("input:checked");
      fieldset.classList.toggle("is-missing", missing);
      var note = fieldset.querySelector(".needs-one-message");
      if (note) note.hidden = !missing;
      if (missing && ok) {
        ok = false;
        var first = fieldset.querySelector("input");
        if (first) first.focus();
      }
    });
    return ok;
  }
  document.addEventListener("submit", function (event) {
    if (!checkRelevance(event.target)) event.preventDefault();
  }, true);
  document.addEventListener("htmx:confirm", function (event) {
    var form = event.detail.elt;
    if (form && form.tagName === "FORM" && !checkRelevance(form)) event.preventDefault();
  });

  // The live diff of reviewed text against the model's output, word by word.
  function tokens(text) {
    return text.match(/\s+|[\p{L}\p{N}_]+|[^\s\p{L}\p{N}_]/gu) || [];
  }
  function diff(a, b) {
    var n = a.length, m = b.length, i, j;
    var table = [];
    for (i = 0; i <= n; i++) table.push(new Uint16Array(m + 1));
    for (i = n - 1; i >= 0; i--)
      for (j = m - 1; j >= 0; j--)
        table[i][j] = a[i] === b[j] ? table[i + 1][j + 1] + 1 : Math.max(table[i + 1][j], table[i][j + 1]);
    var out = [];
    function push(op, text) {
      var last = out[out.length - 1];
      if (last && last.op === op) last.text += text;
      else out.push({ op: op, text: text });
    }
    i = 0; j = 0;
    while (i < n && j < m) {
      if (a[i] === b[j]) { push("equal", a[i]); i++; j++; }
      else if (table[i + 1][j] >= table[i][j + 1]) { push("delete", a[i]); i++; }
      else { push("insert", b[j]); j++; }
    }
    for (; i < n; i++) push("delete", a[i]);
    for (; j < m; j++) push("insert", b[j]);
    return out;
  }
  function renderDiff(textarea) {
    var into = document.querySelector(textarea.dataset.diffInto);
    if (!into) return;
    var before = textarea.dataset.modelText || "", after = textarea.value;
    into.textContent = "";
    if (before === after) {
      var same = document.createElement("span");
      same.className = "muted small";
      same.textContent = "Same as the model's text.";
      into.appendChild(same);
      return;
    }
    var a = tokens(before), b = tokens(after);
    if (a.length * b.length > 250000) { into.textContent = "(too long to compare while typing)"; return; }
    diff(a, b).forEach(function (part) {
      var node = document.createElement(part.op === "insert" ? "ins" : part.op === "delete" ? "del" : "span");
      node.textContent = part.text;
      into.appendChild(node);
    });
  }
  document.addEventListener("input", function (event) {
    var el = event.target;
    if (el.dataset && el.dataset.diffInto) renderDiff(el);
    if (el.name && el.name.indexOf("outcome-") === 0) {
      var all = document.getElementById("scope-all");
      if (all) all.checked = true;
    }
    if (el.name === "outcome") {
      var one = document.getElementById("scope-one");
      if (one) one.checked = true;
    }
    if (el.name && el.name.indexOf("share-") === 0) {
      var split = document.querySelector('input[name="split"]');
      if (split) split.checked = true;
    }
    // And the other way: a candidate picked (a number key, a click) is the answer instead of the split, which
    // the server would otherwise send, dropping the pick it showed.
    if (el.name === "choice" && el.checked) {
      var splitting = el.form && el.form.querySelector('input[name="split"]');
      if (splitting) splitting.checked = false;
    }
    var fieldset = el.closest && el.closest("[data-needs-one].is-missing");
    if (fieldset && fieldset.querySelector("input:checked")) {
      fieldset.classList.remove("is-missing");
      var note = fieldset.querySelector(".needs-one-message");
      if (note) note.hidden = true;
    }
  });

  // A file over its form's limit (`data-max-bytes`: the server's own, which refuses the request unread) is
  // refused here, before the browser spends minutes sending it, with its size and the limit.
  document.addEventListener("change", function (event) {
    var input = event.target;
    if (!(input.matches && input.matches("input[type=file][data-max-bytes]"))) return;
    var limit = Number(input.getAttribute("data-max-bytes"));
    var file = input.files && input.files[0];
    var mib = function (n) { return n < 1048576 ? Math.ceil(n / 1024) + " KiB" : (n / 1048576).toFixed(1) + " MiB"; };
    var over = file && file.size > limit;
    input.setCustomValidity(over ? file.name + " is " + mib(file.size) + "; this form takes at most " + mib(limit)
                                   + "." : "");
    if (over) input.reportValidity();
  });

  // The Scene heat map can be hidden to see the image underneath.
  document.addEventListener("change", function (event) {
    var el = event.target;
    if (el.matches && el.matches("[data-toggle-heat]")) {
      var frame = el.closest("figure").querySelector(".scene-frame");
      if (frame) frame.classList.toggle("heat-off", !el.checked);
    }
  });

  // The claim's lease, counted down in its last minute: an answer given after it ends is kept as a draft.
  // A reviewer still working keeps the item: near the lease's end (its last minute, or its last third when
  // shorter), a key, click or input in the lease's second half renews it (the Keep button's form), once per
  // lease. An idle page lets it end, so an abandoned tab does not hold an item; after the end only Keep (k) or
  // submitting takes the item back, as the page then says. The server answers with the lease line again, or with
  // why the item can no longer be theirs (409), shown in place.
  var lease = { el: null, deadline: 0, began: 0, total: 0, asked: false };
  var lastActivity = 0;
  ["keydown", "pointerdown", "input"].forEach(function (type) {
    document.addEventListener(type, function () { lastActivity = Date.now(); }, true);
  });
  function watchLease() {
    var el = document.getElementById("lease");
    if (!el || el === lease.el) return;
    lease = { el: el, deadline: Date.now() + Number(el.dataset.leaseSeconds) * 1000, began: Date.now(),
              total: Number(el.dataset.leaseTotal) || 600, asked: false };
  }
  function tickLease() {
    watchLease();
    var el = lease.el;
    if (!el || !document.body.contains(el) || !("leaseSeconds" in el.dataset)) return;
    var left = Math.round((lease.deadline - Date.now()) / 1000);
    var keep = el.querySelector("form[data-keep-lease]");
    var near = left <= Math.max(5, Math.min(60, lease.total / 3));
    var working = lastActivity > Math.max(lease.began, Date.now() - lease.total * 500);
    if (keep && left > 0 && near && working && !lease.asked) {
      lease.asked = true;
      submitForm(keep);
      return;
    }
    if (left >= 60) return;
    var text = el.querySelector("[data-lease-text]") || el;
    el.classList.remove("muted");
    el.classList.add("lease-ending");
    if (left > 0) {
      text.textContent = "lease ends in 0:" + String(left).padStart(2, "0") + ": answer now, or keep it";
    } else if (!el.classList.contains("lease-ended")) {
      text.textContent = "lease ended: an answer now is kept as a draft";
      el.classList.add("lease-ended");
      el.setAttribute("role", "status");  // said once, not every second
    }
  }
  document.addEventListener("DOMContentLoaded", tickLease);
  document.addEventListener("htmx:afterSettle", tickLease);
  setInterval(tickLease, 1000);
  // Why a lease could not be kept (409) replaces the lease line, where the reviewer was looking.
  document.addEventListener("htmx:beforeSwap", function (event) {
    var form = event.detail.requestConfig && event.detail.requestConfig.elt;  // detail.elt is the target
    if (event.detail.xhr.status === 409 && form && form.matches && form.matches("form[data-keep-lease]")) {
      event.detail.shouldSwap = true;
      event.detail.isError = false;
    }
  });

  // A search box with data-filter-rows="<selector>" hides the rows that do not contain what is typed.
  document.addEventListener("input", function (event) {
    var box = event.target;
    if (!box.matches || !box.matches("[data-filter-rows]")) return;
    var query = box.value.trim().toLowerCase(), shown = 0;
    document.querySelectorAll(box.dataset.filterRows).forEach(function (row) {
      var match = !query || row.textContent.toLowerCase().indexOf(query) !== -1;
      row.hidden = !match;
      if (match) shown += 1;
    });
    var none = document.getElementById(box.id + "-none");
    if (none) none.hidden = shown > 0;
  });
  // With data-open-first, Enter in such a box follows the first link of the first row still shown.
  document.addEventListener("keydown", function (event) {
    var box = event.target;
    if (event.key !== "Enter" || !box.matches || !box.matches("[data-filter-rows][data-open-first]")) return;
    var rows = Array.prototype.filter.call(document.querySelectorAll(box.dataset.filterRows),
                                           function (row) { return !row.hidden; });
    var link = rows.length && rows[0].querySelector("a[href]");
    if (link) {
      event.preventDefault();
      link.click();
    }
  });

  // The CSRF token as it is now: signing in again (in another tab, after a session ended) rotates it, and the
  // token written into the page when it loaded would then fail every request the page sends.
  document.addEventListener("htmx:configRequest", function (event) {
    var match = document.cookie.match(/(?:^|;\s*)csrftoken=([^;]+)/);
    if (!match) return;
    var token = decodeURIComponent(match[1]);
    event.detail.headers["X-CSRFToken"] = token;
    // A form's own token field is checked before the header.
    if (event.detail.parameters.csrfmiddlewaretoken !== undefined) event.detail.parameters.csrfmiddlewaretoken = token;
  });

  // A failed htmx request changes nothing on the page; say so where messages appear.
  function say(text, link) {
    var box = document.getElementById("messages");
    if (!box) return;
    var p = document.createElement("p");
    p.className = "message message-error";
    p.setAttribute("role", "alert");
    p.textContent = text;
    if (link) {
      var a = document.createElement("a");
      a.href = link.getAttribute("href");
      a.target = "_blank";
      a.rel = "noopener";
      a.textContent = link.textContent;
      p.append(" ", a);
    }
    box.replaceChildren(p);
  }
  // The site's error pages carry their reason in [data-error-reason] and perhaps what to do in [data-error-link]
  // (templates/error.html): say those.
  function errorPage(xhr) {
    var type = xhr && xhr.getResponseHeader("Content-Type") || "";
    if (type.indexOf("text/html") !== 0) return null;
    return new DOMParser().parseFromString(xhr.responseText, "text/html");
  }
  document.addEventListener("htmx:responseError", function (event) {
    var status = event.detail.xhr ? event.detail.xhr.status : 0;
    var page = errorPage(event.detail.xhr);
    var reason = page && page.querySelector("[data-error-reason]");
    if (reason) {
      return say(reason.textContent.replace(/\s+/g, " ").trim() + " (HTTP " + status + ")",
                 page.querySelector("[data-error-link]"));
    }
    say(status === 403 ? "You are not allowed to do that here (HTTP 403). Nothing was changed."
      : status === 404 ? "This item or project is not available to you (HTTP 404)."
      : "The server could not complete this (HTTP " + status + "). Nothing on this page was lost: try again.");
  });
  document.addEventListener("htmx:sendError", function () {
    say("The server did not answer. Check your connection; nothing on this page was lost.");
  });

  // A set-password link (or any read-only field) is selected whole when focused, and [data-copy="#id"] copies
  // that field's text: the clipboard where the browser allows it (a secure page), else the selection's copy.
  document.addEventListener("focusin", function (event) {
    if (event.target.matches && event.target.matches("[data-select-on-focus]")) event.target.select();
  });
  document.addEventListener("click", function (event) {
    var button = event.target.closest && event.target.closest("[data-copy]");
    if (!button) return;
    var field = document.querySelector(button.dataset.copy);
    if (!field) return;
    function copied() {
      button.textContent = "Copied";
      var label = button.getAttribute("aria-label");
      if (label) button.setAttribute("aria-label", label.replace(/^Copy\b/, "Copied"));
    }
    field.select();
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(field.value).then(copied, function () {
        if (document.execCommand("copy")) copied();
      });
    } else if (document.execCommand("copy")) {
      copied();
    }
  });

  // After htmx swaps in the next item, start from the top of the workspace with nothing focused.
  document.addEventListener("htmx:afterSwap", function (event) {
    if (event.detail.target && event.detail.target.id === "workspace" || event.target.id === "workspace") {
      var ws = workspace();
      if (ws && ws.getBoundingClientRect().top < 0) ws.scrollIntoView({ block: "start" });
      if (document.activeElement && document.activeElement !== document.body) document.activeElement.blur();
    }
  });
})();
