/* What a reviewer types in the workspace is kept in this browser until the server has it.
 *
 * A form with data-draft="<key>" (the answer editor, the skip box, an admin's fix of an item's inputs or the
 * target an admin writes when adjudicating; the key names the user and the item) writes its fields to
 * localStorage under "tc-draft:<key>" on every change. When the same form is shown again before the server took
 * it (the page reloaded, the tab was closed and opened again, the reviewer went back or away and returned), the
 * fields come back, with a note and a button that discards them. The entry goes when htmx swaps the workspace
 * after that form's request, because then the server kept it (submitted, skipped, kept as a draft); an answer
 * refused in place keeps it. Entries older than a week are dropped, and signing out drops them all. Without
 * localStorage or JavaScript the page works as it did: only this safety net is missing.
 *
 * A form that also has data-draft-save="<url>" (the answer editor and the skip box, while the reviewer holds the
 * item's claim; an admin's adjudication and fix of the inputs) sends its fields there too, a moment after typing
 * stops and when the page is hidden, so that the user's other browsers have them: the server keeps them (with
 * the claim, or for the admin until the form is sent; `annotate/unsent.py`) and renders them back in
 * data-draft-server (with their age, dated here on this browser's clock). Of the two copies the newer one is
 * restored; the note says how long the server keeps it (data-draft-kept). data-draft-settled is how long ago the
 * form's last send was stored (an answer, an adjudication): a copy typed here before that is dropped, as the
 * work was done since, in another browser.
 *
 * A plain form with data-unsaved-warning has the browser ask before the page is left with its changes unsaved.
 */
(function () {
  "use strict";

  var PREFIX = "tc-draft:";
  var MAX_AGE_MS = 7 * 24 * 3600 * 1000;
  var SEND_AFTER_MS = 1500;  // quiet time after the last change before the server is sent the typing
  var KEEPALIVE_MAX = 60000;  // bytes a request that outlives its page may carry (browsers cap it at 64 KiB)

  function storage() {
    try {
      return window.localStorage;
    } catch (e) {  // blocked by the browser's settings
      return null;
    }
  }

  function keyOf(form) {
    return PREFIX + form.dataset.draft;
  }

  // Every key this file wrote, listed before any is removed (removing shifts the storage's indexes).
  function keptKeys(store) {
    var keys = [];
    for (var i = 0; i < store.length; i++) {
      var key = store.key(i);
      if (key && key.indexOf(PREFIX) === 0) keys.push(key);
    }
    return keys;
  }

  function fire(el, type) {
    el.dispatchEvent(new Event(type, { bubbles: true }));
  }

  // The fields a reviewer can change, by position (the same item renders the same form) and name.
  function fieldsOf(form) {
    var fields = [];
    Array.prototype.forEach.call(form.elements, function (el, index) {
      if (!el.name || /^(hidden|submit|button|reset|file)$/.test(el.type)) return;
      var entry = { index: index, name: el.name };
      if (el.type === "checkbox" || el.type === "radio") entry.checked = el.checked;
      else entry.value = el.value;
      fields.push(entry);
    });
    return fields;
  }

  function save(form) {
    var store = storage();
    if (!store) return;
    try {
      store.setItem(keyOf(form), JSON.stringify({ at: Date.now(), fields: fieldsOf(form) }));
    } catch (e) {
      // Storage full or refused: what the reviewer submits still reaches the server.
    }
  }

  // -- the server's copy -----------------------------------------------------------------------------------------
  var unsent = null;  // {url, timer}: typing not yet sent to the server

  function formName(form) {
    var key = form.dataset.draft;
    return key.slice(key.lastIndexOf(":") + 1);
  }

  function csrfToken() {
    try {
      return JSON.parse(document.body.getAttribute("hx-headers"))["X-CSRFToken"] || "";
    } catch (e) {
      return "";
    }
  }

  function formsSavingTo(url) {
    return Array.prototype.filter.call(document.querySelectorAll("form[data-draft-save]"), function (form) {
      return form.dataset.draftSave === url;
    });
  }

  // Every form of that item that the server keeps, in one request: the server stores what it is sent as it is.
  function send(url) {
    var typed = {};
    formsSavingTo(url).forEach(function (form) { typed[formName(form)] = fieldsOf(form); });
    var body = new URLSearchParams({ typed: JSON.stringify(typed) });
    var options = { method: "POST", body: body, credentials: "same-origin", headers: { "X-CSRFToken": csrfToken() } };
    if (body.toString().length < KEEPALIVE_MAX) options.keepalive = true;  // outlives the page, if it goes
    // Refused or unreachable: this browser's copy is still kept. Refused because the lease ended (409), nothing
    // more is sent from these forms until the page changes (the lease kept again, the item taken back).
    fetch(url, options).then(function (response) {
      if (response.status !== 409) return;
      formsSavingTo(url).forEach(function (form) { form.setAttribute("data-draft-refused", ""); });
    }).catch(function () {});
  }

  function sendLater(form) {
    var url = form.dataset.draftSave;
    if (!url || form.hasAttribute("data-draft-refused")) return;
    if (unsent && unsent.url !== url) sendNow();  // another item's typing goes first
    if (unsent) clearTimeout(unsent.timer);
    unsent = { url: url, timer: setTimeout(sendNow, SEND_AFTER_MS) };
  }

  function sendNow() {
    if (!unsent) return;
    clearTimeout(unsent.timer);
    var url = unsent.url;
    unsent = null;
    send(url);
  }

  function forgetUnsent(url) {
    if (unsent && unsent.url === url) {
      clearTimeout(unsent.timer);
      unsent = null;
    }
  }

  function serverCopy(form) {
    if (!form.dataset.draftServer) return null;
    try {
      var kept = JSON.parse(form.dataset.draftServer);
      return { at: Date.now() - (kept.age || 0), fields: kept.fields || [], server: true };
    } catch (e) {
      return null;
    }
  }

  function discard(form, note) {
    form.reset();  // back to what the server rendered
    Array.prototype.forEach.call(form.elements, function (el) {
      if (el.tagName === "TEXTAREA") fire(el, "input");  // the text editor's diff follows
    });
    var store = storage();
    if (store) store.removeItem(keyOf(form));  // after the events above, which save
    delete form.dataset.draftServer;
    if (form.dataset.draftSave) {  // the server's copy is discarded too, at once: it is sent what the page shows now
      forgetUnsent(form.dataset.draftSave);
      send(form.dataset.draftSave);
    }
    note.remove();
  }

  function showNote(form, elsewhere) {
    var note = document.createElement("p");
    note.className = "message message-info small draft-restored";
    note.setAttribute("role", "status");
    note.textContent = elsewhere
      ? "Restored what you typed and had not sent yet, " + (form.dataset.draftKept || "kept for you while the item is yours") + ". "
      : "Restored what you typed here and had not sent yet. ";
    var button = document.createElement("button");
    button.type = "button";
    button.className = "outline secondary compact";
    button.textContent = "Discard it";
    button.addEventListener("click", function () { discard(form, note); });
    note.append(button);
    form.parentNode.insertBefore(note, form);
  }

  function restore(form) {
    if (form.dataset.draftSeen) return;  // once per form shown: a later swap elsewhere must not undo typing
    form.dataset.draftSeen = "1";
    var store = storage();
    var raw = store && store.getItem(keyOf(form));
    var local = null;
    if (raw) {
      try {
        local = JSON.parse(raw);
      } catch (e) {
        store.removeItem(keyOf(form));
      }
    }
    // Typed here before the form's last send was stored (the work done since, in another browser): stale.
    var settled = form.dataset.draftSettled ? Date.now() - Number(form.dataset.draftSettled) : 0;
    if (local && (local.at || 0) < settled) {
      store.removeItem(keyOf(form));
      local = null;
    }
    var server = serverCopy(form);
    if (server && local && JSON.stringify(server.fields) === JSON.stringify(local.fields)) server = null;
    var kept = server && (!local || server.at > (local.at || 0)) ? server : local;
    if (!kept) return;
    var restored = false;
    (kept.fields || []).forEach(function (entry) {
      var el = form.elements[entry.index];
      if (!el || el.name !== entry.name) return;  // the form changed since: leave that field as served
      if ("checked" in entry) {
        if (el.checked === entry.checked) return;
        el.checked = entry.checked;
        fire(el, "change");
      } else {
        if (el.value === entry.value) return;
        el.value = entry.value;
        fire(el, "input");
      }
      var details = el.closest("details");
      if (details) details.open = true;  // a restored split shows its shares
      restored = true;
    });
    if (restored) showNote(form, kept.server);
    else if (store) store.removeItem(keyOf(form));  // nothing differs from what the server has
  }

  function restoreAll() {
    document.querySelectorAll("form[data-draft]").forEach(restore);
  }

  function dropOld() {
    var store = storage();
    if (!store) return;
    var now = Date.now();
    keptKeys(store).forEach(function (key) {
      var at = 0;
      try {
        at = JSON.parse(store.getItem(key)).at || 0;
      } catch (e) { /* unreadable: dropped below */ }
      if (now - at > MAX_AGE_MS) store.removeItem(key);
    });
  }

  function onEdit(event) {
    var form = event.target && event.target.form;
    if (!form || !form.dataset.draft) return;
    save(form);
    sendLater(form);
  }
  document.addEventListener("input", onEdit);
  document.addEventListener("change", onEdit);

  // A form on its way to the server takes its typing with it: nothing is sent for it afterwards (its claim ends).
  // So does one that settles the item without being kept itself (an adjudication's "Pick this"): what waits to be
  // sent from the item's other forms would be kept again after it.
  document.addEventListener("htmx:beforeRequest", function (event) {
    var elt = event.detail.elt;
    if (!elt || !elt.dataset) return;
    if (elt.dataset.draftSave) forgetUnsent(elt.dataset.draftSave);
    else if (elt.hasAttribute("data-draft-settles") && elt.closest("#workspace")) {
      elt.closest("#workspace").querySelectorAll("form[data-draft-save]").forEach(function (form) {
        forgetUnsent(form.dataset.draftSave);
      });
    }
  });
  // Unless the server did not take it (refused in place, or not reached): the form is still on the page, and the
  // server's copy catches up with what it holds.
  document.addEventListener("htmx:afterRequest", function (event) {
    var elt = event.detail.elt;
    if (elt && elt.dataset && elt.dataset.draftSave && elt.isConnected) sendLater(elt);
  });
  document.addEventListener("submit", function (event) {
    if (event.target.dataset && event.target.dataset.draftSave) forgetUnsent(event.target.dataset.draftSave);
  });
  // The page going away (another page, a closed tab, a phone's app switch) sends what is waiting.
  document.addEventListener("visibilitychange", function () {
    if (document.visibilityState === "hidden") sendNow();
  });
  window.addEventListener("pagehide", sendNow);

  document.addEventListener("htmx:afterSwap", function (event) {
    document.querySelectorAll("form[data-draft-refused]").forEach(function (form) {
      form.removeAttribute("data-draft-refused");
    });
    var elt = event.detail.requestConfig && event.detail.requestConfig.elt;
    var target = event.detail.target;
    // The workspace is swapped only when the server took the form (a refused answer goes to the editor's error
    // slot, a failed request swaps nothing). Then every form of that item goes: an answer typed and then skipped
    // is not brought back. A form marked data-draft-settles (an adjudication's "Pick this") settles the item
    // without being kept itself.
    var store = storage();
    var settles = elt && elt.dataset && (elt.dataset.draft || elt.hasAttribute("data-draft-settles"));
    if (store && settles && target && target.id === "workspace") {
      target.querySelectorAll("form[data-draft]").forEach(function (form) { store.removeItem(keyOf(form)); });
    }
    restoreAll();
  });

  // Signing out leaves nothing typed behind on a shared computer.
  document.addEventListener("submit", function (event) {
    if (!event.target.matches("form[data-drafts-clear]")) return;
    var store = storage();
    if (store) keptKeys(store).forEach(function (key) { store.removeItem(key); });
  });

  // A plain form marked data-unsaved-warning (a project's settings, a new project: long guidelines typed there)
  // has the browser ask before the page is left with changes not yet saved. Sending the form is leaving it saved
  // (the server answers with the form again and its errors where it refused; typing again marks it again).
  var unsavedForms = [];
  document.addEventListener("input", function (event) {
    var form = event.target.form || (event.target.closest && event.target.closest("form"));
    if (form && form.hasAttribute("data-unsaved-warning") && unsavedForms.indexOf(form) < 0) unsavedForms.push(form);
  });
  document.addEventListener("submit", function (event) {
    unsavedForms = unsavedForms.filter(function (form) { return form !== event.target; });
  });
  window.addEventListener("beforeunload", function (event) {
    if (!unsavedForms.some(function (form) { return form.isConnected; })) return;
    event.preventDefault();
    event.returnValue = "";  // older browsers ask only when this is set
  });

  function start() {
    dropOld();
    restoreAll();
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
