#!/usr/bin/python3
"""docs/ARCHITECTURE.md's map of the files matches the tree: every source file
under lib/, transports/, topo/, torch/ and tools/ is named in the section
"## Map of the files", and every file named there exists.

A file is named as a path in backticks (`lib/core/params.cc`); `dir/name.{h,cc}`
names both. Each file is described by one bullet only: a file that leads two
bullets, or a bullet that holds a second "- `" inside it, is a map that was
edited wrong (it happened once: text pasted into the middle of a line).
Exit 0 when they match; else the differences, exit 1.
Usage: file_map_check.py [SOURCE_ROOT]
"""
import os
import re
import sys

FOLDERS = ("lib", "transports", "topo", "torch", "tools")
SOURCE = re.compile(r"\.(cc|h|c|cu|py|map|f90)$")


def section(text):
    m = re.search(r"^## Map of the files\n(.*?)(?=^## )", text, re.S | re.M)
    if not m:
        raise SystemExit("file_map_check: docs/ARCHITECTURE.md has no '## Map of the files' section")
    return m


def malformed(text):
    """Bullets that hold a second bullet, and files that lead more than one bullet."""
    problems, leaders = [], {}
    for line in section(text).group(1).split("\n"):
        if " - `" in line.lstrip("- "):
            problems.append("a bullet holds another bullet: %s" % line[:100])
        lead = re.match(r"- `([^`]+)`", line)
        if lead:
            leaders[lead.group(1)] = leaders.get(lead.group(1), 0) + 1
    problems += ["`%s` leads %d bullets" % (k, n) for k, n in sorted(leaders.items()) if n > 1]
    return problems


def named(text):
    m = section(text)
    out = set()
    for token in re.findall(r"`([\w./{},+-]+)`", m.group(1)):
        b = re.match(r"(.*)\{([^}]*)\}(.*)", token)
        for path in ([b.group(1) + alt + b.group(3) for alt in b.group(2).split(",")] if b else [token]):
            if "/" in path and path.split("/")[0] in FOLDERS and SOURCE.search(path):
                out.add(path)
    return out


def tree(root):
    out = set()
    for folder in FOLDERS:
        for dirpath, dirnames, files in os.walk(os.path.join(root, folder)):
            dirnames[:] = [d for d in dirnames if d != "__pycache__"]
            for f in files:
                if SOURCE.search(f):
                    out.add(os.path.relpath(os.path.join(dirpath, f), root))
    return out


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))))
    with open(os.path.join(root, "docs", "ARCHITECTURE.md")) as f:
        text = f.read()
    doc, problems = named(text), malformed(text)
    files = tree(root)
    missing, stale = sorted(files - doc), sorted(doc - files)
    for p in problems:
        print("docs/ARCHITECTURE.md's map: %s" % p)
    for p in missing:
        print("not in docs/ARCHITECTURE.md's map: %s" % p)
    for p in stale:
        print("in the map, but no such file: %s" % p)
    if not missing and not stale and not problems:
        print("docs/ARCHITECTURE.md's map names all %d source files, each once" % len(files))
    return 1 if missing or stale or problems else 0


if __name__ == "__main__":
    sys.exit(main())
