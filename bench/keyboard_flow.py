"""How long does a reviewer wait between items, in a real browser, on a project of 100,000 items?

    python bench/keyboard_flow.py [--items 100000] [--rounds 200]
        [--database postgres://postgres@127.0.0.1:5432/tc_flow_bench] [--cache redis://127.0.0.1:6379/0]

`bench/team_scale.py` times the server; this times what a reviewer sees. It seeds the same database as that
bench (its name must end in "bench": it is dropped and created afresh), runs the site under gunicorn with 2
workers on loopback (settings `bench/scale_site`), and drives Debian's chromium (headless) as one reviewer who
starts reviewing and then, `--rounds` times, picks the first candidate (`1`) and submits (`Enter`). Measured in
the page, on its own clock:

- Enter to the next item: from the Enter key's event to the moment the next item's workspace is in the page
  (htmx swapped it in: one POST that stores the answer and claims the next item), and to the next frame after
  it (the browser has laid it out and painted);
- the submit's server time (its `Server-Timing` header, read from the browser's resource timing);
- the baseline, in the same rounds, alternating: the page `fetch()`ing the one-SELECT view of
  `bench/scale_site` (a round trip through the same browser, network stack and server that does no work);
- a reload of the item page (navigation to its `load` event, every asset from the browser's cache) against a
  navigation to the one-SELECT view;
- typing ahead: `--ahead` items more answered by a reviewer who does not wait for the next item, pressing `1`
  and `Enter` every `--key-ms` milliseconds, faster than items come (keys pressed while an item loads wait for
  it, up to 32: `static/keyboard.js`). Counted on the server afterwards: every item answered once, with the
  first candidate, none lost; timed from the first answer stored to the last, per item, against the waited
  rounds' Enter to the next item painted.

No goal is set in the issue for these; the figures say how much of a reviewer's wait is the site's own work.
The script waits for the page's own follow-up requests (the progress line) to finish before the next key, as
a reviewer reading the item would.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

import team_scale  # noqa: E402  (bench/ on the path: the seed, the server and the settings are that bench's)

# In the page: when Enter went down, when the next item's workspace arrived, and the frame after it.
WATCH = """
() => {
  const flow = window.__flow = {pressed: null, swapped: [], painted: []};
  performance.setResourceTimingBufferSize(100000);
  document.addEventListener("keydown", (e) => { if (e.key === "Enter") flow.pressed = performance.now(); }, true);
  let shown = document.getElementById("workspace").dataset.item;
  new MutationObserver(() => {
    const workspace = document.getElementById("workspace");
    if (!workspace || workspace.dataset.item === shown || flow.pressed === null) return;
    shown = workspace.dataset.item;
    const pressed = flow.pressed;
    flow.pressed = null;
    flow.swapped.push(performance.now() - pressed);
    requestAnimationFrame(() => requestAnimationFrame((t) => flow.painted.push(t - pressed)));
  }).observe(document.body, {childList: true, subtree: true, attributes: true, attributeFilter: ["data-item"]});
}
"""
FETCH = """
async (url) => {
  const started = performance.now();
  const response = await fetch(url, {credentials: "same-origin"});
  await response.text();
  return performance.now() - started;
}
"""
SUBMIT_SERVER_MS = """
() => performance.getEntriesByType("resource")
  .filter((e) => e.name.endsWith("/submit/"))
  .map((e) => (e.serverTiming.find((s) => s.name === "app") || {}).duration)
  .filter((d) => d !== undefined)
"""
QUIET = "() => !document.querySelector('.htmx-request') && window.__flow.pressed === null"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=100_000, help="items per project (default 100,000)")
    parser.add_argument("--rounds", type=int, default=200, help="items answered by keyboard (default 200)")
    parser.add_argument("--ahead", type=int, default=16,
                        help="items answered typing ahead (default 16: 32 keys, as many as the page holds)")
    parser.add_argument("--key-ms", type=float, default=5,
                        help="milliseconds between keys when typing ahead (default 5: faster than items come)")
    parser.add_argument("--database", default=os.environ.get(
        "TC_BENCH_DATABASE", "postgres://postgres@127.0.0.1:5432/tc_flow_bench"))
    parser.add_argument("--cache", default=os.environ.get("TC_BENCH_CACHE_URL", "redis://127.0.0.1:6379/0"),
                        help="the site's TC_CACHE_URL ('none': sessions from the database)")
    args = parser.parse_args()
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        raise SystemExit("Debian's chromium is needed: apt-get install -y chromium")
    if not urlsplit(args.database).path.rstrip("/").endswith("bench"):
        raise SystemExit(f"--database {args.database}: its name must end in 'bench' (it is dropped and recreated)")

    data_dir = Path(tempfile.mkdtemp(prefix="keyboard-flow-"))
    env = team_scale._environment(args.database, data_dir, args.cache)
    os.environ.update(env)
    team_scale._recreate_database(args.database)

    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    call_command("collectstatic", verbosity=0, interactive=False)  # served by `scale_site` as a web server would
    started = time.perf_counter()
    seeded = team_scale._seed(args.items, reviewers=1, visitors=1)
    print(f"seeded {args.items:,} items x 3 projects in {time.perf_counter() - started:.0f} s", flush=True)

    port = team_scale._free_port()
    server = team_scale._start_gunicorn(port, env, data_dir)
    try:
        results = _drive(f"http://127.0.0.1:{port}", seeded, args, chromium)
    finally:
        team_scale._stop(server)
        team_scale._forget_sessions(args.cache, env["TC_CACHE_KEY_PREFIX"])
    _report(args, results)
    shutil.rmtree(data_dir, ignore_errors=True)


def _drive(base: str, seeded: dict, args, chromium: str) -> dict:
    from playwright.sync_api import sync_playwright

    rounds = args.rounds
    baseline = f"{base}/bench/baseline/{seeded['baseline_item']}/"
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.goto(f"{base}/accounts/login/")
        page.fill("#id_username", seeded["visitors"][0])
        page.fill("#id_password", team_scale.PASSWORD)
        page.click("button[type=submit]")
        page.goto(f"{base}/projects/{team_scale.REVIEW}/")
        page.get_by_role("button", name="Start reviewing").click()
        page.wait_for_selector("#workspace[data-item]")
        page.wait_for_function("() => !document.querySelector('.htmx-request')")
        page.evaluate(WATCH)

        fetched = []
        for _ in range(rounds):
            fetched.append(page.evaluate(FETCH, baseline))
            answered = len(page.evaluate("window.__flow.swapped"))
            page.keyboard.press("1")
            page.keyboard.press("Enter")
            page.wait_for_function(f"() => window.__flow.swapped.length > {answered}", timeout=30_000)
            page.wait_for_function(QUIET, timeout=30_000)
        page.wait_for_function(f"() => window.__flow.painted.length >= {rounds}")
        flow = page.evaluate("({swapped: window.__flow.swapped, painted: window.__flow.painted})")
        server_ms = page.evaluate(SUBMIT_SERVER_MS)
        item_url = page.url
        ahead = _type_ahead(page, seeded["visitors"][0], args.ahead, args.key_ms)

        reloads, navigations = [], []
        for _ in range(max(10, rounds // 10)):
            navigations.append(_navigation_ms(page, baseline))
            reloads.append(_navigation_ms(page, item_url))
        browser.close()
    # The first rounds warm both workers and the browser's caches.
    skip = min(10, rounds // 5)
    return {"fetch": fetched[skip:], "swapped": flow["swapped"][skip:], "painted": flow["painted"][skip:],
            "server": server_ms[skip:], "reload": reloads[2:], "navigation": navigations[2:], "ahead": ahead}


def _type_ahead(page, username: str, items: int, key_ms: float) -> dict:
    """Answer `items` items pressing `1` and `Enter` every `key_ms` ms without waiting for the next item; then
    read from the database what was stored for them."""
    from annotate.models import Answer

    # Playwright's sync API runs an event loop in this thread; the reads below are plain blocking calls between
    # its calls, which Django allows only when told.
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "1"
    answers = Answer.objects.filter(reviewer__username=username)
    before = set(answers.values_list("pk", flat=True))
    started = time.perf_counter()
    for _ in range(items):
        for key in ("1", "Enter"):
            page.keyboard.press(key)
            page.wait_for_timeout(key_ms)  # the reviewer's pace, not a wait for the page
    typed = time.perf_counter() - started
    page.wait_for_function(QUIET, timeout=60_000)
    done = time.perf_counter() - started
    new = list(answers.exclude(pk__in=before).values("item_id", "target", "created_at", "item__inputs"))
    firsts = sum(a["target"] == a["item__inputs"]["hypotheses"][0]["id"] for a in new)
    stored = sorted(a["created_at"] for a in new)
    return {"items": items, "answered": len(new), "distinct": len({a["item_id"] for a in new}), "first": firsts,
            "typed_s": typed, "done_s": done,
            "stored_s": (stored[-1] - stored[0]).total_seconds() if len(stored) > 1 else 0.0}


def _navigation_ms(page, url: str) -> float:
    page.goto(url, wait_until="load")
    return page.evaluate("performance.getEntriesByType('navigation')[0].loadEventEnd")


def _report(args, r: dict) -> None:
    def p(values: list[float], q: float) -> float:
        return team_scale._percentile(values, q)

    fetch = statistics.median(r["fetch"])
    navigation = statistics.median(r["navigation"])
    rows = [
        ("baseline: the page fetch()es the one-SELECT view, p50", f"{fetch:.1f} ms", f"p95 {p(r['fetch'], 95):.1f} ms"),
        ("Enter to the next item in the page, p50", f"{statistics.median(r['swapped']):.1f} ms",
         f"{statistics.median(r['swapped']) / fetch:.1f}x baseline; p95 {p(r['swapped'], 95):.1f} ms"),
        ("Enter to the next item painted, p50", f"{statistics.median(r['painted']):.1f} ms",
         f"{statistics.median(r['painted']) / fetch:.1f}x baseline; p95 {p(r['painted'], 95):.1f} ms"),
        ("  of which the submit's server time, p50", f"{statistics.median(r['server']):.1f} ms",
         f"p95 {p(r['server'], 95):.1f} ms (stores the answer, claims and renders the next item)"),
        ("navigation to the one-SELECT view, p50", f"{navigation:.1f} ms", "to its load event"),
        ("reload of the item page, p50", f"{statistics.median(r['reload']):.1f} ms",
         f"{statistics.median(r['reload']) / navigation:.1f}x the navigation baseline; to its load event"),
    ]
    ahead = r["ahead"]
    waited = statistics.median(r["painted"])
    if ahead["answered"] > 1:
        per_item = ahead["stored_s"] * 1000 / (ahead["answered"] - 1)
        rows.append(("typing ahead: time per item, first to last answer stored", f"{per_item:.1f} ms",
                     f"{per_item / waited:.2f}x the waited Enter to painted; keys typed in {ahead['typed_s']:.1f} s, "
                     f"all answered {ahead['done_s']:.1f} s after the first"))
    rows.append(("typing ahead: items answered of those typed", f"{ahead['answered']} of {ahead['items']}",
                 f"{ahead['distinct']} distinct items, {ahead['first']} with the candidate typed (1)"))
    print()
    print(f"keyboard_flow: {args.items:,} items, {len(r['swapped'])} answered by keyboard (after warming), "
          f"chromium headless, gunicorn 2 sync workers, {os.cpu_count()} CPUs")
    width = max(len(row[0]) for row in rows)
    for name, value, note in rows:
        print(f"  {name:<{width}}  {value:>10}  {note}")


if __name__ == "__main__":
    main()
