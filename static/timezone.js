/* The browser's time zone, kept in the cookie "tc_tz" so that the server shows times in it
 * (annotate.middleware.BrowserTimeZone): a lease's end, an answer's last change, a job's start, the progress
 * charts' days and hours, a reviewer's "today". Written only when it changed, so the next page uses it; without
 * JavaScript the site keeps to UTC and the footer says so.
 */
(function () {
  "use strict";

  var zone;
  try {
    zone = Intl.DateTimeFormat().resolvedOptions().timeZone;
  } catch (e) {
    return;
  }
  if (!zone || !/^[A-Za-z0-9_+\/-]+$/.test(zone)) return;  // IANA names need no quoting in a cookie
  var cookie = "tc_tz=" + zone;
  if (document.cookie.split("; ").indexOf(cookie) !== -1) return;
  document.cookie = cookie + "; path=/; max-age=31536000; samesite=lax" +
    (location.protocol === "https:" ? "; secure" : "");
})();
