# SPDX-License-Identifier: Apache-2.0
"""The documentation has no dead ends.

* every relative link and image in README.md and docs/**/*.md names a file
  of the repository, and a `#anchor` names a heading of that page (GitHub's
  rule for heading ids);
* nothing points outside the repository: no link that climbs above its
  root, no `../shared`, no upstream specification document cited as if the
  reader had it, in the docs and in source comments;
* every image in docs/img is shown by some page;
* names that do not exist are not mentioned (a list of known offenders),
  every `maru-*` program a page tells you to run is one the build makes,
  and every in-tree path in backticks exists.

No daemon and no build output is needed: only the tree.
"""
import glob
import os
import re

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PAGES = sorted([os.path.join(REPO, "README.md")]
               + glob.glob(os.path.join(REPO, "docs", "**", "*.md"), recursive=True))


def rel(path):
    return os.path.relpath(path, REPO)


def prose(path):
    """The page without its fenced code blocks (``` ... ```), line numbers
    kept (fenced lines become empty)."""
    out, fenced = [], False
    for line in open(path, encoding="utf-8"):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            out.append("\n")
            continue
        out.append("\n" if fenced else line)
    return "".join(out)


def slug(heading):
    """GitHub's id for a heading: links reduced to their text, lower case,
    punctuation dropped, spaces to hyphens."""
    h = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).strip().lower()
    h = re.sub(r"[^\w\- ]", "", h)
    return h.replace(" ", "-")


def anchors(path):
    seen, out = {}, set()
    for line in prose(path).splitlines():
        m = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        s = slug(m.group(1))
        n = seen.get(s, 0)
        seen[s] = n + 1
        out.add(s if n == 0 else f"{s}-{n}")
    for m in re.finditer(r'<a\s+(?:name|id)="([^"]+)"', prose(path)):
        out.add(m.group(1))
    return out


LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


def links(path):
    text = re.sub(r"`[^`\n]*`", "", prose(path))   # code spans are not links
    for m in LINK.finditer(text):
        yield text.count("\n", 0, m.start()) + 1, m.group(1)


def test_pages_found():
    assert os.path.join(REPO, "README.md") in PAGES
    assert len(PAGES) > 10


@pytest.mark.parametrize("page", PAGES, ids=rel)
def test_relative_links_resolve(page):
    bad = []
    for lineno, target in links(page):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):       # http:, mailto:
            continue
        path, _, frag = target.partition("#")
        dest = os.path.normpath(os.path.join(os.path.dirname(page), path)) if path else page
        where = f"{rel(page)}:{lineno}: {target}"
        if not (dest + os.sep).startswith(REPO + os.sep):
            bad.append(f"{where}: outside the repository")
        elif not os.path.exists(dest):
            bad.append(f"{where}: no such file")
        elif frag and dest.endswith(".md") and frag not in anchors(dest):
            bad.append(f"{where}: no heading #{frag} in {rel(dest)}")
    assert not bad, "\n".join(bad)


def test_slug_rule():
    assert slug("Restart: the journal") == "restart-the-journal"
    assert slug("The server speaks ZMTP itself (no libzmq): A/B") == \
        "the-server-speaks-zmtp-itself-no-libzmq-ab"
    assert slug("`MaruHandler`") == "maruhandler"
    assert slug("A client's limits on the request path") == \
        "a-clients-limits-on-the-request-path"


# Citations of documents that are not in this repository.  Upstream Maru's
# specification pages were cited as "metadata-protocol.md §5" and the like;
# docs/protocol.md, docs/python-api.md and the daemons' pages say it all here.
OUTSIDE = [
    r"\.\./shared", r"shared/spec", r"(?:^|[\s\"'(=])/work/", r"STYLE\.md", r"STYLE §",
    r"metadata-protocol\.md", r"resource-manager-protocol\.md",
    r"later-additions(\.md)?\s*§", r"cli-and-tools\.md",
    r"(?<!docs/)python-api\.md\s*§", r"\bspec(?:'s)?\s*§",
    r"\b(?:RM|protocol) spec\b",
]
SOURCES = ["README.md", "docs", "src", "include", "python", "tools", "tests",
           "bench", "scripts", "systemd", "examples", "CMakeLists.txt", "dev.sh"]
TEXT_EXT = (".md", ".c", ".h", ".py", ".sh", ".txt", ".cmake", ".in", ".service",
            ".conf", ".svg", ".sym", ".toml", ".cfg", ".rules")


def source_files():
    me = os.path.abspath(__file__)
    for top in SOURCES:
        p = os.path.join(REPO, top)
        if os.path.isfile(p):
            yield p
            continue
        for d, dirs, files in os.walk(p):
            dirs[:] = [x for x in dirs if x not in ("build", "corpus", "__pycache__")
                       and not x.endswith(".egg-info")]
            for f in files:
                f = os.path.join(d, f)
                if f != me and (f.endswith(TEXT_EXT) or os.path.basename(f) == "CMakeLists.txt"):
                    yield f


def test_no_reference_outside_the_repository():
    pat = re.compile("|".join(OUTSIDE))
    bad = []
    for f in source_files():
        for i, line in enumerate(open(f, encoding="utf-8", errors="replace"), 1):
            if pat.search(line):
                bad.append(f"{rel(f)}:{i}: {line.strip()[:120]}")
    assert not bad, "\n".join(bad)


def test_every_image_is_shown():
    text = "".join(open(p, encoding="utf-8").read() for p in PAGES)
    shown = {os.path.normpath(os.path.join(os.path.dirname(p), t.partition("#")[0]))
             for p in PAGES for _, t in links(p)}
    unused = []
    for img in sorted(glob.glob(os.path.join(REPO, "docs", "img", "*"))):
        if img not in shown:
            unused.append(rel(img) + (" (named, but not shown)"
                                      if os.path.basename(img) in text else ""))
    assert not unused, "images no page shows: " + ", ".join(unused)


# Names that a page once used for things that do not exist here.
NOT_OURS = ["stats_monitor", "maru_sglang"]


def test_no_names_of_things_that_do_not_exist():
    bad = [f"{rel(p)}: {n}" for p in PAGES for n in NOT_OURS
           if re.search(r"\b%s\b" % n, open(p, encoding="utf-8").read())]
    assert not bad, "\n".join(bad)


def programs():
    """Every executable the CMake tree builds (add_executable names) or
    installs as a script (install(PROGRAMS name ...)), and the Python
    package's commands (console_scripts of python/setup.py)."""
    names = set(re.findall(r'"([\w.+-]+) = [\w.]+:\w+"',
                           open(os.path.join(REPO, "python", "setup.py")).read()))
    for f in glob.glob(os.path.join(REPO, "**", "CMakeLists.txt"), recursive=True) + \
            glob.glob(os.path.join(REPO, "**", "*.cmake"), recursive=True):
        if "/build" in rel(f) or rel(f).startswith(("build", ".venv")):
            continue
        text = open(f).read()
        names.update(re.findall(r"add_executable\(\s*([\w.+-]+)", text))
        names.update(re.findall(r"install\(\s*PROGRAMS\s+([\w.+-]+)", text))
    return names


# maru-* words in backticks that are not programs: files, directories,
# thread names, protocol labels
NOT_PROGRAMS = {"maru-pool", "maru-state", "maru-resourced", "maru-rpc-N",
                "maru-rm-auth-1", "maru-venv", "maru-hw", "maru-dax",
                "maru-server.service", "maru-resource-manager.service",
                "maru-index-PORT"}


def test_maru_programs_mentioned_are_built():
    built = programs()
    assert {"maru-resource-manager", "maru-server", "pool_monitor"} <= built
    bad = []
    for p in PAGES:
        text = open(p, encoding="utf-8").read()
        for span in re.findall(r"`([^`\n]+)`", text):
            for word in re.findall(r"(?:^|[\s/(])(maru-[A-Za-z0-9_.-]*[A-Za-z0-9])", span):
                if word in built or word in NOT_PROGRAMS or "." in word:
                    continue
                bad.append(f"{rel(p)}: `{span}`: {word} is not a program we build")
    assert not bad, "\n".join(bad)


def test_build_paths_name_built_programs():
    """`build/.../NAME` with no file extension is an executable target."""
    built = programs()
    bad = []
    for p in PAGES:
        for span in re.findall(r"`([^`\n]+)`", open(p, encoding="utf-8").read()):
            for path in re.findall(r"(?:^|[\s=(])build/([\w./-]+)", span):
                name = os.path.basename(path.rstrip("/"))
                if path.endswith("/") or "." in name or name in built:
                    continue
                if os.path.isdir(os.path.join(REPO, os.path.dirname(path), name)):
                    continue                     # build/<dir> mirrors a source dir
                bad.append(f"{rel(p)}: build/{path}")
    assert not bad, "\n".join(bad)


TREE = ("src/", "bench/", "tools/", "tests/", "scripts/", "systemd/", "examples/",
        "include/", "python/")


def test_tree_paths_exist():
    """Backticked paths into the tree exist (a stem or a glob counts)."""
    bad = []
    for p in PAGES:
        for span in re.findall(r"`([^`\n]+)`", open(p, encoding="utf-8").read()):
            for path in re.findall(r"(?:^|[\s(=])((?:%s)[\w./*{},-]+)" % "|".join(TREE), span):
                path = path.rstrip(".,)")
                if path.endswith((".so", ".a")):           # build outputs
                    continue
                pat = re.sub(r"\{[^}]*\}?", "*", path)
                if not glob.glob(os.path.join(REPO, pat) + "*"):
                    bad.append(f"{rel(p)}: {path}")
    assert not bad, "\n".join(bad)


def test_svg_images_are_well_formed():
    import xml.etree.ElementTree as ET
    svgs = glob.glob(os.path.join(REPO, "docs", "img", "*.svg"))
    assert svgs
    for f in svgs:
        root = ET.parse(f).getroot()
        assert root.tag.endswith("svg"), f


def test_architecture_diagram_is_current():
    """The diagram names what exists: maru-server speaks ZMTP itself (no
    libzmq socket or socket monitor) and journals its index."""
    svg = open(os.path.join(REPO, "docs", "img", "architecture.svg"), encoding="utf-8").read()
    for gone in ("socket monitor", "ZeroMQ ROUTER"):
        assert gone not in svg
    for name in ("maru-server", "maru-resource-manager", "ZMTP", "journal", "libmaru"):
        assert name in svg
    readme = open(os.path.join(REPO, "README.md"), encoding="utf-8").read()
    assert "](docs/img/architecture.svg)" in readme
