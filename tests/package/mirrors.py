#!/usr/bin/env python3
"""Prints this machine's Debian bookworm apt sources as one-line "deb URI SUITE
COMPONENTS" entries (for mmdebstrap), read from /etc/apt/sources.list and the
enabled files in /etc/apt/sources.list.d/ (deb822 .sources and one-line .list).
Other repositories (vendor repos) are left out: the test root gets Debian only."""
import glob
import sys


def one_line(path):
    for line in open(path, encoding="utf-8", errors="replace"):
        words = line.split("#", 1)[0].split()
        if len(words) >= 4 and words[0] == "deb":
            if words[1].startswith("["):  # options: [arch=amd64 signed-by=...]
                while words and not words[0].endswith("]"):
                    words.pop(0)
                words = ["deb"] + words[1:]
            yield words[1], words[2], words[3:]


def deb822(path):
    text = open(path, encoding="utf-8", errors="replace").read()
    for para in text.split("\n\n"):
        fields, key = {}, None
        for line in para.splitlines():
            if line.startswith("#") or not line.strip():
                continue
            if line[0] in " \t" and key:
                fields[key] += " " + line.strip()
            elif ":" in line:
                key, value = line.split(":", 1)
                key = key.strip().lower()
                fields[key] = value.strip()
        if "deb" not in fields.get("types", "").split() or fields.get("enabled", "yes").lower() == "no":
            continue
        for uri in fields.get("uris", "").split():
            for suite in fields.get("suites", "").split():
                yield uri, suite, fields.get("components", "main").split()


def main():
    entries = []
    files = glob.glob("/etc/apt/sources.list") + sorted(glob.glob("/etc/apt/sources.list.d/*.list"))
    for path in files:
        entries += one_line(path)
    for path in sorted(glob.glob("/etc/apt/sources.list.d/*.sources")):
        entries += deb822(path)
    seen = set()
    for uri, suite, components in entries:
        if not suite.startswith("bookworm") or "main" not in components:
            continue
        line = f"deb {uri} {suite} main"
        if line not in seen:
            seen.add(line)
            print(line)
    if not seen:
        print("mirrors.py: no Debian bookworm source in /etc/apt", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
