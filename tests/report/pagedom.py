"""The report page as a real browser renders it: Debian's chromium, headless,
JavaScript on, its DOM dumped after the page's script ran, then parsed
here into a small tree to query (the standard library's HTMLParser)."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="needs Debian's chromium package (apt-get install -y chromium); .ci/run installs it"
)

BROWSER_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-extensions",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-default-apps",
    "--hide-scrollbars",
)

VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


@dataclass
class Node:
    tag: str
    attrs: dict
    parent: Node | None = None
    children: list = field(default_factory=list)
    text: list = field(default_factory=list)

    @property
    def classes(self) -> set[str]:
        return set((self.attrs.get("class") or "").split())

    def all(self, tag: str | None = None, cls: str | None = None, **attrs: str) -> list[Node]:
        """Every element below this one with the tag, the class and the attributes given."""
        out = []
        stack = list(reversed(self.children))
        while stack:
            n = stack.pop()
            if (
                (tag is None or n.tag == tag)
                and (cls is None or cls in n.classes)
                and all(n.attrs.get(k.replace("_", "-")) == v for k, v in attrs.items())
            ):
                out.append(n)
            stack.extend(reversed(n.children))
        return out

    def one(self, tag: str | None = None, cls: str | None = None, **attrs: str) -> Node:
        found = self.all(tag, cls, **attrs)
        assert len(found) == 1, f"{len(found)} elements {tag}.{cls} {attrs}"
        return found[0]

    def content(self) -> str:
        """The text of this element and every element below it."""
        parts = list(self.text)
        for c in self.children:
            parts.append(c.content())
        return " ".join(p for p in parts if p.strip())


class _Parser(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Node("#document", {})
        self.cur = self.root

    def handle_starttag(self, tag, attrs):
        node = Node(tag, {k: (v if v is not None else "") for k, v in attrs}, self.cur)
        self.cur.children.append(node)
        if tag not in VOID:
            self.cur = node

    def handle_startendtag(self, tag, attrs):
        self.cur.children.append(Node(tag, {k: (v if v is not None else "") for k, v in attrs}, self.cur))

    def handle_endtag(self, tag):
        n = self.cur
        while n is not None and n.tag != tag:
            n = n.parent
        if n is not None and n.parent is not None:
            self.cur = n.parent

    def handle_data(self, data):
        self.cur.text.append(data)


def parse(html: str) -> Node:
    p = _Parser()
    p.feed(html)
    p.close()
    return p.root


def render(page: Path, fragment: str = "") -> Node:
    """The page's DOM after chromium loaded it (at ``#fragment``) and ran its script."""
    done = subprocess.run(
        [CHROMIUM, *BROWSER_FLAGS, "--dump-dom", page.resolve().as_uri() + fragment],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0 and "<body" in done.stdout, done.stderr[-2000:]
    return parse(done.stdout)


def screenshot(page: Path, png: Path, width: int = 1280, height: int = 2600) -> Path:
    done = subprocess.run(
        [CHROMIUM, *BROWSER_FLAGS, f"--window-size={width},{height}", f"--screenshot={png}", page.resolve().as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0 and png.exists(), done.stderr[-2000:]
    return png
