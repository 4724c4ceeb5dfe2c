#!/usr/bin/env python3
"""Every link of the project's Markdown pages resolves.

Usage: check_links.py SOURCE_DIR

Reads README.md, ARCHITECTURE.md, RELIABILITY.md, envs/README.md and
docs/*.md under SOURCE_DIR. For each inline link [text](target) or
reference definition [label]: target outside code: a relative file link
must name a file or folder of the repository, and a #anchor (alone, or
after a file) must be a heading of the target page, slugged as GitHub
slugs them (lower case; everything but letters, digits, spaces, hyphens
and underscores dropped; spaces to hyphens; a repeated slug gets -1,
-2, ...), or an id="..." / name="..." of an HTML tag there. A link out of
the repository (a URL with a scheme, an absolute path, or a path that
leaves SOURCE_DIR) is an error too: the pages cite the project's own
files only. Prints one line per broken link (file:line: what) and exits
1 when there is any, else prints how many links it checked and exits 0.
"""
import glob
import os
import re
import sys

PAGES = ["README.md", "ARCHITECTURE.md", "RELIABILITY.md", "envs/README.md"]
FENCE = re.compile(r"^\s*(```|~~~)")
INLINE = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
REFDEF = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s.*)?$")
HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
HTML_ID = re.compile(r"<[^>]*\b(?:id|name)\s*=\s*[\"']([^\"']+)[\"']")
CODE_SPAN = re.compile(r"(`+)(.+?)\1")


def prose_lines(text):
    """(line number, line) of the lines outside fenced code blocks."""
    fence = None
    for n, line in enumerate(text.split("\n"), 1):
        m = FENCE.match(line)
        if m:
            if fence is None:
                fence = m.group(1)
            elif m.group(1) == fence:
                fence = None
            continue
        if fence is None:
            yield n, line


def slug(heading):
    """GitHub's anchor of a heading's Markdown text."""
    text = CODE_SPAN.sub(lambda m: m.group(2), heading)
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link's text
    text = re.sub(r"<[^>]+>", "", text)                      # inline HTML
    text = text.replace("*", "").replace("~", "")
    text = re.sub(r"(?<![A-Za-z0-9])_+|_+(?![A-Za-z0-9])", "", text)  # _emphasis_, not snake_case
    text = text.strip().lower()
    text = "".join(c for c in text if c.isalnum() or c in " -_")
    return text.replace(" ", "-")


_anchors = {}


def anchors(path):
    """The anchors a page defines: its headings' slugs and its HTML ids."""
    if path not in _anchors:
        found, seen = set(), {}
        with open(path, encoding="utf-8") as f:
            text = f.read()
        for _, line in prose_lines(text):
            m = HEADING.match(line)
            if m:
                s = slug(m.group(2))
                if s in seen:
                    seen[s] += 1
                    found.add("%s-%d" % (s, seen[s]))
                else:
                    seen[s] = 0
                    found.add(s)
            for i in HTML_ID.findall(line):
                found.add(i)
        _anchors[path] = found
    return _anchors[path]


def links(text):
    """(line number, target) of every link outside code."""
    for n, line in prose_lines(text):
        bare = CODE_SPAN.sub("", line)
        for m in INLINE.finditer(bare):
            yield n, m.group(1)
        m = REFDEF.match(bare)
        if m:
            yield n, m.group(1)


def check(root, page, problems):
    path = os.path.join(root, page)
    with open(path, encoding="utf-8") as f:
        text = f.read()
    count = 0
    for n, target in links(text):
        count += 1
        where = "%s:%d" % (page, n)
        if re.match(r"^[A-Za-z][A-Za-z0-9+.-]*:", target) or target.startswith("//"):
            problems.append("%s: %s is outside the repository (cite the project's own files)" % (where, target))
            continue
        file_part, _, anchor = target.partition("#")
        if file_part.startswith("/"):
            problems.append("%s: %s is an absolute path; write it relative to %s" % (where, target, page))
            continue
        dest = os.path.normpath(os.path.join(os.path.dirname(path), file_part)) if file_part else path
        if os.path.relpath(dest, root).startswith(".."):
            problems.append("%s: %s leaves the repository" % (where, target))
            continue
        if not os.path.exists(dest):
            problems.append("%s: %s: no such file" % (where, target))
            continue
        if anchor:
            if os.path.isdir(dest) or not dest.endswith(".md"):
                problems.append("%s: %s: an anchor into a file that is not a Markdown page" % (where, target))
            elif anchor not in anchors(dest):
                problems.append("%s: %s: %s has no heading with the anchor #%s"
                                % (where, target, os.path.relpath(dest, root), anchor))
    return count


def main():
    if len(sys.argv) != 2:
        sys.stderr.write("usage: check_links.py SOURCE_DIR\n")
        return 2
    root = os.path.abspath(sys.argv[1])
    pages = [p for p in PAGES if os.path.exists(os.path.join(root, p))]
    pages += sorted(os.path.relpath(p, root) for p in glob.glob(os.path.join(root, "docs", "*.md")))
    problems, count = [], 0
    for page in pages:
        count += check(root, page, problems)
    for p in problems:
        print(p)
    if problems:
        print("links: %d of %d links in %d pages do not resolve" % (len(problems), count, len(pages)))
        return 1
    print("links: %d links in %d pages resolve" % (count, len(pages)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
