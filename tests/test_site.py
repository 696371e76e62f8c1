"""The course site builds offline with warnings as errors, and every page works in a real browser.

The site is built once per session with the command the README gives (``sphinx-build -W --keep-going -c docs .``)
into a temporary folder, or taken from ``SGRAD_SITE_DIR`` when ``.ci/run`` has just built it, then served on
127.0.0.1 and opened page by page in headless Chromium (Debian's ``chromium``, driven by Playwright; Playwright
downloads no browser here). Any request that would leave 127.0.0.1 is refused and fails the page.

The browser tests skip where Chromium or the ``docs`` extra is missing, unless ``SGRAD_REQUIRE_BROWSER=1``
(as ``.ci/run`` sets it): then they fail instead.  The tests of the files themselves never skip.  Each chapter's
page is saved as a PNG in ``docs/_build/screenshots/`` (a CI artifact, for a person to look at).
"""

import functools
import html.parser
import http.server
import importlib.util
import json
import os
import pathlib
import re
import shutil
import struct
import subprocess
import sys
import threading
import urllib.error
import urllib.parse
import urllib.request

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
BUILD_ARGS = ["-W", "--keep-going", "-c", "docs", "."]  # after sphinx-build; the README's command, then the folder
REQUIRE_BROWSER = os.environ.get("SGRAD_REQUIRE_BROWSER") == "1"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync"]

SCREENSHOTS = REPO / "docs" / "_build" / "screenshots"

RESULTS = sorted((REPO / "docs" / "results").glob("*.md"))
NOTEBOOKS = sorted((REPO / "notebooks").glob("*.ipynb"))
CHAPTERS = [f"notebooks/{p.stem}.html" for p in NOTEBOOKS]
# Every page a reader can reach: the chapters, the docs pages, and Sphinx's own index pages.
PAGES = (["index.html", "genindex.html", "search.html", "py-modindex.html"]
         + [f"docs/{p.stem}.html" for p in sorted((REPO / "docs").glob("*.md"))]
         + [f"docs/results/{p.stem}.html" for p in RESULTS]
         + CHAPTERS)


def unavailable(reason):
    if REQUIRE_BROWSER:
        pytest.fail(f"{reason}; SGRAD_REQUIRE_BROWSER=1, so the site's tests may not skip")
    pytest.skip(reason)


def png_size(path):
    """(width, height) of the PNG at ``path``, read from its header; fails unless the file is a PNG."""
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    return struct.unpack(">II", head[16:24])


def markdown_images(path):
    return re.findall(r"!\[[^\]]*\]\(([^)\s]+)\)", path.read_text())


# --- the files, without a browser -------------------------------------------------------------------

@pytest.mark.parametrize("page", RESULTS, ids=lambda p: p.stem)
def test_every_results_page_shows_a_figure_that_is_a_real_png(page):
    images = markdown_images(page)
    assert images, f"{page.name} shows no figure"
    for image in images:
        width, height = png_size((page.parent / image).resolve())
        assert width >= 200 and height >= 100, (image, width, height)


def test_the_readme_shows_the_comparison_figure_and_its_links_resolve():
    readme = (REPO / "README.md").read_text()
    assert "![" in readme.split("## The hand-written loop")[0], "the comparison figure belongs above the fold"
    assert "docs/compare/compare.png" in markdown_images(REPO / "README.md")
    links = re.findall(r"\]\(([^)\s#]+)(?:#[^)]*)?\)", readme)
    local = [link for link in links if "://" not in link]
    assert len(local) >= 8, local
    missing = [link for link in local if not (REPO / link).exists()]
    assert not missing, f"the README links to files that do not exist: {missing}"


def test_the_readme_is_a_landing_page_of_at_most_150_lines():
    assert len((REPO / "README.md").read_text().splitlines()) <= 150


def test_the_readme_builds_the_site_with_the_command_the_tests_and_ci_use():
    readme = (REPO / "README.md").read_text()
    assert "sphinx-build " + " ".join(BUILD_ARGS) + " docs/_build/html" in readme
    assert "sphinx-build " + " ".join(BUILD_ARGS) + ' "$SGRAD_SITE_DIR"' in (REPO / ".ci" / "run").read_text()


def test_the_table_of_contents_holds_every_notebook_once():
    index = (REPO / "docs" / "index.md").read_text()
    listed = re.findall(r"^/notebooks/(\S+)$", index, re.MULTILINE)
    assert sorted(listed) == sorted(p.stem for p in (REPO / "notebooks").glob("*.ipynb"))


def stored_runs():
    """docs/chapters.py, the script that stores each chapter's full-size run, as a module."""
    spec = importlib.util.spec_from_file_location("chapters", REPO / "docs" / "chapters.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_chapter_has_a_stored_full_size_run_of_its_code_as_committed(path):
    chapters = stored_runs()
    stored = chapters.stored_path(path.stem)
    assert stored.exists(), f"no stored run of {path.name}: run `python docs/chapters.py {path.stem[:2]}`"
    run = json.loads(stored.read_text())
    reason = chapters.why_stale(json.loads(path.read_text()), run)
    assert reason is None, f"{stored.name}: {reason}; run `python docs/chapters.py {path.stem[:2]}`"
    assert not chapters.problems(run), chapters.problems(run)
    assert run["metadata"]["sgrad"]["seconds"] > 0


def test_a_chapter_whose_code_changed_since_its_stored_run_is_refused_with_the_command_that_stores_it_again():
    chapters = stored_runs()
    path = NOTEBOOKS[0]
    notebook = json.loads(path.read_text())
    code = [cell for cell in notebook["cells"] if cell["cell_type"] == "code"]
    code[1]["source"] = ["print('an edit')\n", *code[1]["source"]]
    stored = json.loads(chapters.stored_path(path.stem).read_text())
    assert chapters.why_stale(notebook, stored) == "code cell 2 differs from the one that ran"
    with pytest.raises(ValueError, match=rf"code cell 2 differs .*python docs/chapters.py {path.stem[:2]}"):
        chapters.with_outputs(json.dumps(notebook), chapters.stored_path(path.stem))
    markdown_only = json.loads(path.read_text())
    markdown_only["cells"][0]["source"] = ["# an edited title\n"]
    assert chapters.why_stale(markdown_only, stored) is None, "a Markdown edit needs no new run"


def test_the_stored_runs_are_small_and_hold_no_widget_state():
    stored = sorted((REPO / "docs" / "chapters").glob("*.ipynb"))
    assert [p.stem for p in stored] == [p.stem for p in NOTEBOOKS]
    total = sum(p.stat().st_size for p in stored)
    assert total < 4e6, f"the stored runs take {total / 1e6:.1f} MB; keep them under 4 MB"
    assert not [p.name for p in stored if "application/vnd.jupyter.widget" in p.read_text()]


# --- the built site, in a browser -----------------------------------------------------------------

@pytest.fixture(scope="session")
def site(tmp_path_factory):
    """The built site's folder."""
    for module in ("sphinx", "myst_nb", "sphinx_book_theme", "playwright"):
        if importlib.util.find_spec(module) is None:
            unavailable(f"the docs extra is not installed ({module} is missing): pip install -e '.[docs]'")
    if os.environ.get("SGRAD_SITE_DIR"):
        return pathlib.Path(os.environ["SGRAD_SITE_DIR"])
    out = tmp_path_factory.mktemp("site")
    build = subprocess.run([sys.executable, "-m", "sphinx", *BUILD_ARGS, str(out / "html"), "-d", str(out / "doctrees")],
                           cwd=REPO, capture_output=True, text=True, timeout=1800)
    assert build.returncode == 0, f"the site does not build:\n{build.stdout[-4000:]}\n{build.stderr[-4000:]}"
    return out / "html"


@pytest.fixture(scope="session")
def server(site):
    """The site served on 127.0.0.1 at a free port, for the session; its base URL."""
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(site)))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()


@pytest.fixture(scope="session")
def browser(tmp_path_factory):
    """Headless Chromium with a fresh profile, for the session."""
    if not os.path.exists(CHROMIUM):
        unavailable("Chromium is not installed: apt-get install -y chromium")
    if importlib.util.find_spec("playwright") is None:
        unavailable("Playwright is not installed: pip install -e '.[docs]'")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(tmp_path_factory.mktemp("chromium-profile")), executable_path=CHROMIUM, headless=True,
            args=CHROMIUM_FLAGS, viewport={"width": 1280, "height": 900})
        try:
            yield context
        finally:
            context.close()


class Anchors(html.parser.HTMLParser):
    """The ids (and old-style names) that a page's links may point at."""

    def __init__(self):
        super().__init__()
        self.ids = set()

    def handle_starttag(self, tag, attrs):
        for key, value in attrs:
            if key == "id" or (tag == "a" and key == "name"):
                self.ids.add(value)


@functools.cache
def fetch(url):
    """(HTTP status, the ids on the page) for a URL of the served site."""
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            body = response.read()
            status = response.status
    except urllib.error.HTTPError as error:
        return error.code, frozenset()
    anchors = Anchors()
    if url.endswith((".html", "/")):
        anchors.feed(body.decode("utf-8"))
    return status, frozenset(anchors.ids)


# Text nodes outside code, scripts and rendered maths: raw TeX there is an equation that did not render.
RAW_TEX = """() => {
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  const raw = [];
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    if (node.parentElement.closest('pre, code, script, style, mjx-container, .highlight')) continue;
    const m = node.textContent.match(/\\$\\$|\\\\\\(|\\\\\\[|\\\\(frac|hat|partial|mathbb|left|right)\\b/);
    if (m) raw.push(node.textContent.trim().slice(0, 80));
  }
  return raw;
}"""

IMAGES = """async () => {
  const images = Array.from(document.images);
  for (const image of images) image.loading = 'eager';
  await Promise.all(images.map(image => image.decode().catch(() => null)));
  return images.map(image => ({src: image.getAttribute('src'), width: image.naturalWidth,
                               output: image.closest('.cell_output') !== null}));
}"""

TYPESET = """async () => {
  if (window.MathJax && MathJax.startup && MathJax.startup.promise) await MathJax.startup.promise;
  const maths = Array.from(document.querySelectorAll('.math'));
  return {maths: maths.length, rendered: maths.filter(m => m.querySelector('mjx-container')).length};
}"""


@pytest.mark.parametrize("path", PAGES)
def test_page_loads_cleanly_in_chromium(browser, server, path):
    problems = []
    page = browser.new_page()
    page.on("console", lambda message: message.type == "error" and problems.append(f"console: {message.text}"))
    page.on("pageerror", lambda error: problems.append(f"script error: {error}"))
    page.on("requestfailed", lambda request: problems.append(f"request failed: {request.url}"))
    page.on("response", lambda response: response.status >= 400 and problems.append(f"{response.status}: {response.url}"))

    def local_only(route):
        if urllib.parse.urlsplit(route.request.url).hostname == "127.0.0.1":
            route.continue_()
        else:
            problems.append(f"a request leaves the machine: {route.request.url}")
            route.abort()

    page.route("**/*", local_only)
    try:
        response = page.goto(server + path, wait_until="load")
        assert response is not None and response.status == 200, f"{path}: {response and response.status}"
        if path == "index.html":  # the root sends the reader to the book's first page
            page.wait_for_url(server + "docs/index.html")
        page.wait_for_load_state("networkidle")
        assert not problems, f"{path}:\n" + "\n".join(problems)

        maths = page.evaluate(TYPESET)
        assert maths["rendered"] == maths["maths"], f"{path}: {maths['maths'] - maths['rendered']} equations not rendered"
        raw = page.evaluate(RAW_TEX)
        assert not raw, f"{path}: TeX left in the text: {raw}"

        images = page.evaluate(IMAGES)
        broken = [image["src"] for image in images if image["width"] == 0]
        assert not broken, f"{path}: images that did not load: {broken}"
        if path.startswith("notebooks/"):
            assert any(image["output"] for image in images), f"{path}: the chapter shows no figure"
        if path.startswith("docs/results/") or path == "docs/index.html":
            assert any(image["width"] >= 200 for image in images), f"{path}: no figure"

        hrefs = page.eval_on_selector_all("a[href]", "links => links.map(a => a.href)")
        page.wait_for_timeout(200)  # late console messages
    finally:
        page.close()
    assert not problems, f"{path}:\n" + "\n".join(problems)

    for href in set(hrefs):
        parts = urllib.parse.urlsplit(href)
        if not href.startswith(server):
            continue
        target = urllib.parse.urlunsplit((parts.scheme, parts.netloc, parts.path, parts.query, ""))
        status, ids = fetch(target)
        assert status == 200, f"{path} links to {href}: HTTP {status}"
        if parts.fragment:
            assert urllib.parse.unquote(parts.fragment) in ids, f"{path} links to {href}: no such anchor"


def test_equations_render_on_the_home_page_and_a_chapter(browser, server):
    # The page test above checks that every equation present renders; this one checks that some are present.
    for path in ("docs/index.html", "notebooks/05_conditioning_cdni.html"):
        page = browser.new_page()
        try:
            page.goto(server + path, wait_until="networkidle")
            maths = page.evaluate(TYPESET)
            assert maths["rendered"] >= 2, (path, maths)
        finally:
            page.close()


def test_the_api_reference_documents_every_name_sgrad_exports(site):
    import sgrad

    page = (site / "docs" / "api.html").read_text()
    missing = []
    for name in sgrad.__all__:
        obj = getattr(sgrad, name)
        anchor = rf'id="module-{obj.__name__}"' if isinstance(obj, type(sgrad)) else rf'id="(sgrad|data_gen)[\w.]*\.{name}"'
        if not re.search(anchor, page):
            missing.append(name)
    assert not missing, f"not in the API reference: {missing}"


def open_page(browser, server, path):
    """The page at ``path``, loaded, its equations typeset."""
    page = browser.new_page()
    page.goto(server + path, wait_until="networkidle")
    page.evaluate(TYPESET)
    return page


# A chapter's text in two parts, what its code cells printed or displayed and its prose (outside code and maths);
# the code blocks whose lines run past the column; and the page's stamp, set when its outputs are a stored run.
CHAPTER = r"""() => {
  const outputs = Array.from(document.querySelectorAll('.cell_output')).map(o => o.innerText).join('\n');
  const walker = document.createTreeWalker(document.querySelector('article'), NodeFilter.SHOW_TEXT);
  const prose = [];
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    if (!node.parentElement.closest('pre, code, script, style, mjx-container, .cell_input, .cell_output')) {
      prose.push(node.textContent);
    }
  }
  const cut = Array.from(document.querySelectorAll('article pre'))
    .filter(pre => pre.scrollWidth > pre.clientWidth + 1).map(pre => pre.innerText.slice(0, 60));
  const stamp = document.querySelector('meta[name="sgrad-outputs"]');
  return {outputs, prose: prose.join(''), cut, stamp: stamp && stamp.content};
}"""

# What a published chapter must not show: a smoke run's banner, a loader that found nothing, the machine's paths.
LEAKS = re.compile(r"SGRAD_SMOKE=1|not found|(?<![\w.])/(?:work|root|home|tmp)/")


@pytest.mark.parametrize("path", CHAPTERS)
def test_a_chapter_shows_its_full_size_run_and_nothing_of_the_machine_that_ran_it(browser, server, path):
    page = open_page(browser, server, path)
    try:
        shown = page.evaluate(CHAPTER)
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SCREENSHOTS / f"{pathlib.Path(path).stem}.png"), full_page=True)
    finally:
        page.close()
    assert shown["stamp"] == "full size", f"{path}: its outputs are not its notebook's stored full-size run"
    leaks = sorted({match.group(0) for match in LEAKS.finditer(shown["outputs"])})
    assert not leaks, f"{path}: the outputs show {leaks}"
    leaks = sorted({match.group(0) for match in LEAKS.finditer(shown["prose"])})
    assert not leaks, f"{path}: the prose shows {leaks}"
    assert not shown["cut"], f"{path}: code runs past the column's edge: {shown['cut']}"


# Text that should have been rendered as something else: a Markdown table printed as text (a line that starts and
# ends with "|", anywhere but in code the reader reads as code), reStructuredText's double backticks, and a TeX
# subscript outside the maths (but on the API page: a docstring writes its formulas as plain text, for a reader
# of the source).
UNRENDERED = r"""() => {
  const article = document.querySelector('article') || document.body;
  const shown = article.cloneNode(true);
  shown.querySelectorAll('.cell_input, script, style, mjx-container').forEach(e => e.remove());
  document.body.appendChild(shown);  // innerText needs a rendered element
  const tables = shown.innerText.split('\n').map(line => line.trim())
    .filter(line => line.length > 2 && line.startsWith('|') && line.endsWith('|'));
  shown.remove();
  const walker = document.createTreeWalker(article, NodeFilter.SHOW_TEXT);
  const backticks = [], subscripts = [];
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    if (node.parentElement.closest('pre, code, script, style, mjx-container, .cell_input')) continue;
    if (node.textContent.includes('``')) backticks.push(node.textContent.trim().slice(0, 80));
    const tex = node.textContent.match(/\S*_\{[^}]*\}\S*/);
    if (tex) subscripts.push(tex[0]);
  }
  return {tables, backticks, subscripts};
}"""


@pytest.mark.parametrize("path", PAGES)
def test_no_page_shows_a_raw_table_double_backticks_or_a_tex_subscript(browser, server, path):
    page = open_page(browser, server, path)
    try:
        found = page.evaluate(UNRENDERED)
    finally:
        page.close()
    assert not found["tables"], f"{path}: a table printed as text: {found['tables'][:3]}"
    assert not found["backticks"], f"{path}: literal double backticks: {found['backticks'][:3]}"
    if path != "docs/api.html":
        assert not found["subscripts"], f"{path}: TeX subscripts outside the maths: {found['subscripts'][:5]}"


# The homework's methods (notebook 07), each under the class a student subclasses.
HOMEWORK = {"sgrad.nn.layers.Layer": ("forward", "backward", "update"),
            "sgrad.dni.decoupled.DNI": ("backward", "forward_and_synthetic_update", "update_synthetic_weights")}

CLASS_OF = """id => {
  const entry = document.getElementById(id);
  if (!entry) return null;
  const owner = entry.parentElement.closest('dl.py.class');
  return owner ? owner.querySelector(':scope > dt').id : '(no class)';
}"""


def test_the_api_page_shows_the_homework_methods_under_their_class_and_the_class_bases(browser, server):
    page = open_page(browser, server, "docs/api.html")
    try:
        owners = {f"{cls}.{method}": page.evaluate(CLASS_OF, f"{cls}.{method}")
                  for cls, methods in HOMEWORK.items() for method in methods}
        bases = page.evaluate("""() => document.getElementById('sgrad.dni.decoupled.DNI').nextElementSibling
                                        .querySelector('p').innerText""")
    finally:
        page.close()
    wrong = {name: owner for name, owner in owners.items() if owner != name.rsplit(".", 1)[0]}
    assert not wrong, f"missing, or not under their class (the entry and the class it sits under): {wrong}"
    assert bases == "Bases: DecoupledModule, Layer", bases


def test_the_home_page_has_one_search_field_and_no_heading_twice(browser, server):
    page = open_page(browser, server, "docs/index.html")
    try:
        searches = page.evaluate("""() => Array.from(document.querySelectorAll('.search-button-field'))
                                          .filter(field => field.offsetParent !== null).length""")
        headings = page.evaluate("""() => Array.from(document.querySelectorAll(
                                          'article h1, article h2, article h3, article p.caption'))
                                          .map(heading => heading.innerText.replace(/#$/, '').trim())""")
    finally:
        page.close()
    assert searches == 1, f"{searches} search fields on the home page"
    assert len(headings) == len(set(headings)), f"a heading appears twice: {headings}"
