#!/usr/bin/env python3
"""Checks that only daemon/ and tools/ name RealTimeSource (issue 15): every
other module reads the clock through the `TimeSource&` its owner hands down,
so a test can hand a SimulatedTimeSource and step time instead of sleeping.

Allowed to name it: files under daemon/ and tools/; common/clock.h and
common/clock.cc, which define it; a program's main (a file named main.cc or
*_main.cc); and test code, exempt as in check_includes.py (*_test.cc, fake_*,
test_*, *_bench.cc, fuzz_*, and the tests/, bench/ and docs/ folders). A name
in a `//` comment does not count.

  check_clock.py ROOT               check the tree at ROOT; exit 1 listing each use
  check_clock.py --self-test        prove the check fails on forbidden uses (small
                                    trees, and this script's exit code on them)
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

import structure_check

NAME = re.compile(r"\bRealTimeSource\b")
EXEMPT_DIRS = ("tests", "bench", "docs", "build", ".git", "node_modules")
ALLOWED_DIRS = ("daemon", "tools")
ALLOWED_FILES = ("common/clock.h", "common/clock.cc")


def is_test_code(name):
    base = os.path.basename(name)
    return (base.endswith("_test.cc") or base.startswith("fake_") or base.startswith("test_")
            or base.endswith("_bench.cc") or base.startswith("fuzz_"))


def is_program_main(name):
    base = os.path.basename(name)
    return base == "main.cc" or base.endswith("_main.cc")


def strip_comments(line, in_block):
    """(code of `line` without its comments, whether a /* comment is still
    open at its end). A comment opener inside a string literal is taken as
    one: good enough for a name check, and it errs towards allowing."""
    code = ""
    while line:
        if in_block:
            end = line.find("*/")
            if end < 0:
                return code, True
            line, in_block = line[end + 2:], False
            continue
        slash, block = line.find("//"), line.find("/*")
        if slash >= 0 and (block < 0 or slash < block):
            return code + line[:slash], False
        if block < 0:
            return code + line, False
        code += line[:block] + " "
        line, in_block = line[block + 2:], True
    return code, in_block


def check(root):
    problems = []
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root).replace(os.sep, "/")
        if rel_dir == ".":
            dirnames[:] = [d for d in dirnames
                           if d not in EXEMPT_DIRS + ALLOWED_DIRS and not d.startswith(".")]
            continue
        dirnames.sort()
        for name in sorted(filenames):
            if not name.endswith((".cc", ".h")) or is_test_code(name) or is_program_main(name):
                continue
            rel = f"{rel_dir}/{name}"
            if rel in ALLOWED_FILES:
                continue
            with open(os.path.join(dirpath, name), encoding="utf-8", errors="replace") as f:
                in_block = False
                for lineno, line in enumerate(f, 1):
                    code, in_block = strip_comments(line, in_block)
                    if NAME.search(code):
                        problems.append(f"{rel}:{lineno}: names RealTimeSource; only daemon/ and tools/ (and "
                                        "programs' mains) may: take a `const TimeSource&` from the caller")
    return problems


def self_test():
    def tree(files):
        d = tempfile.mkdtemp(prefix="knap-clock-")
        for path, text in files.items():
            os.makedirs(os.path.dirname(os.path.join(d, path)), exist_ok=True)
            with open(os.path.join(d, path), "w") as f:
                f.write(text)
        return d

    use = "auto& c = RealTimeSource::instance();\n"
    ok = tree({
        "common/clock.h": "class RealTimeSource final : public TimeSource {};\n",
        "common/clock.cc": "RealTimeSource& RealTimeSource::instance() { static RealTimeSource s; return s; }\n",
        "daemon/knapd.cc": use,
        "tools/knap/pull.cc": use,
        "api/server/dev_server_main.cc": use,                    # a program's main
        "router/router_test.cc": use,                            # test code
        "runtime/runner/pod_start_bench.cc": use,                # a benchmark's main
        "tests/e2e/helper.cc": use,
        "bench/router/router_bench.cc": use,
        "router/router.h": "// metrics read the TimeSource (the same clock as RealTimeSource)\n"
                           "/* RealTimeSource\n   RealTimeSource */ int x;\n",
        "router/timing.cc": "RealTimeSourceLike y;  // another name\n",
        "router/x.cc": "int y;  // a note /* RealTimeSource\nint z;\n",   # // hides the /*
    })
    try:
        assert check(ok) == [], check(ok)
    finally:
        shutil.rmtree(ok, ignore_errors=True)
    bad = tree({
        "runtime/containerd/client.cc": "  if (t == nullptr) t = &RealTimeSource::instance();\n",
        "runtime/containerd/client.h": "#include <x>\n  TimeSource* time = &knap::RealTimeSource::instance();\n",
        "common/loop.cc": "/* a comment */ Loop l(RealTimeSource::instance());\n",
        "acme/manager.cc": "/*\n*/ RealTimeSource clock;\n",
    })
    try:
        problems = check(bad)
        expected = ["acme/manager.cc:2", "common/loop.cc:1", "runtime/containerd/client.cc:1",
                    "runtime/containerd/client.h:2"]
        for e in expected:
            assert any(p.startswith(e + ":") for p in problems), (e, problems)
        assert len(problems) == len(expected), problems
        run = subprocess.run([sys.executable, os.path.abspath(__file__), bad], capture_output=True, text=True,
                             check=False)
        assert run.returncode == 1, ("forbidden uses must fail", run.returncode, run.stdout)
        for e in expected:
            assert e in run.stdout, (e, run.stdout)
    finally:
        shutil.rmtree(bad, ignore_errors=True)
    print(f"self-test ok: allowed uses pass; {len(expected)} forbidden uses are each reported (exit 1)")


def main():
    return structure_check.run(
        check, self_test, "RealTimeSource is named only in daemon/, tools/, common/clock and programs' mains",
        lambda n: f"{n} use(s) of RealTimeSource outside daemon/ and tools/")


if __name__ == "__main__":
    sys.exit(main())
