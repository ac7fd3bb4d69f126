#!/usr/bin/env python3
"""Checks every #include "dir/file.h" in knap's sources against the folder
table in README.md (issue 15): a folder may include only its own headers and
those of the folders its row names under "may depend on".

The third column of a row lists folder names (`common`, `api/server`, ...),
"everything", or "—" for none. A backticked header path (`images/image_source.h`)
allows that one header of a folder without allowing the rest of it. Test code
(*_test.cc, fake_*, test_*, *_bench.cc, fuzz_*) and the tests/, bench/ and docs/
folders are not checked: tests may reach into what they test.

An include of a folder of the tree that has no row is a violation too (a
new top-level folder needs its row before others may use it); an include
whose first component is no folder of the tree (generated protobuf headers)
is not checked.

  check_includes.py ROOT               check the tree at ROOT; exit 1 listing violations
  check_includes.py --self-test [ROOT] prove the check fails on forbidden edges: on
                                       small trees, and (with ROOT) through this
                                       script's exit code on a copy of ROOT's table
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

import structure_check

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
EXEMPT_DIRS = ("tests", "bench", "docs", "build", ".git", "node_modules")


def parse_table(readme_text):
    """Returns {folder: (set of folders, set of single headers) or None for everything}."""
    rows = {}
    in_table = False
    for line in readme_text.splitlines():
        if line.startswith("| folder |"):
            in_table = True
            continue
        if in_table:
            if not line.startswith("|"):
                break
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if len(cells) < 3 or set(cells[0]) <= set("-: "):
                continue
            m = re.match(r"`([^`]+)/`", cells[0])
            if not m:
                continue
            rows[m.group(1)] = cells[2]
    table = {}
    names = set(rows)
    for folder, deps in rows.items():
        if "everything" in deps:
            table[folder] = None
            continue
        headers = set(re.findall(r"`([a-z0-9_/]+\.h)`", deps))
        text = re.sub(r"`[a-z0-9_/]+\.h`", " ", deps)
        folders = set()
        for word in re.findall(r"[a-z][a-z0-9_]*(?:/[a-z][a-z0-9_]*)*", text):
            # A row's folder ("api/server"), or a subfolder of one ("runtime/containerd").
            if word in names or (word.split("/")[0] in names and "/" in word):
                folders.add(word)
        table[folder] = (folders, headers)
    return table


def owner(path, folders):
    """The longest table folder containing path ("api/server/x.cc" -> "api/server")."""
    best = None
    for f in folders:
        if path == f or path.startswith(f + "/"):
            if best is None or len(f) > len(best):
                best = f
    return best


def is_test_code(name):
    base = os.path.basename(name)
    return (base.endswith("_test.cc") or base.startswith("fake_") or base.startswith("test_")
            or base.endswith("_bench.cc") or base.startswith("fuzz_"))


def check(root):
    with open(os.path.join(root, "README.md"), encoding="utf-8") as f:
        table = parse_table(f.read())
    if not table:
        return ["README.md: no folder table found"]
    problems = []
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        if rel_dir == ".":
            # build dirs are /build*/ (.gitignore): build/, build-fuzz/, ...
            dirnames[:] = [d for d in dirnames
                           if d not in EXEMPT_DIRS and not d.startswith((".", "build"))]
            continue
        for name in filenames:
            if not name.endswith((".cc", ".h")) or is_test_code(name):
                continue
            rel = os.path.join(rel_dir, name).replace(os.sep, "/")
            src_owner = owner(rel, table)
            if src_owner is None:
                problems.append(f"{rel}: its folder has no row in README.md's folder table")
                continue
            allowed = table[src_owner]
            with open(os.path.join(dirpath, name), encoding="utf-8", errors="replace") as f:
                for lineno, line in enumerate(f, 1):
                    m = INCLUDE.match(line)
                    if not m or "/" not in m.group(1):
                        continue
                    inc = m.group(1)
                    inc_owner = owner(inc, table)
                    if inc_owner is None:
                        if os.path.isdir(os.path.join(root, inc.split("/")[0])):
                            problems.append(f"{rel}:{lineno}: includes {inc}, whose folder has no row in "
                                            "README.md's folder table")
                        continue  # generated header (protobuf), not a folder of the tree
                    if allowed is None:
                        continue  # a row allowing everything
                    same = inc_owner == src_owner or inc_owner.startswith(src_owner + "/") \
                        or src_owner.startswith(inc_owner + "/")
                    folders, headers = allowed
                    if same or inc in headers or any(inc.startswith(f + "/") for f in folders):
                        continue
                    problems.append(f"{rel}:{lineno}: includes {inc}, but README.md says `{src_owner}/` "
                                    f"may depend on: {', '.join(sorted(folders | headers)) or 'nothing'}")
    return problems


SELF_TEST_README = """# x

| folder | role | may depend on |
|---|---|---|
| `common/` | basics | — |
| `images/` | images | common |
| `runtime/` | pods | common; `images/image_source.h` |
| `tools/` | cli | common, runtime/containerd |
| `daemon/` | main | everything |
"""


def self_test():
    def tree(files):
        d = tempfile.mkdtemp(prefix="knap-includes-")
        with open(os.path.join(d, "README.md"), "w") as f:
            f.write(SELF_TEST_README)
        for path, text in files.items():
            os.makedirs(os.path.dirname(os.path.join(d, path)), exist_ok=True)
            with open(os.path.join(d, path), "w") as f:
                f.write(text)
        return d

    ok = tree({
        "common/a.h": "",
        "images/image_source.h": '#include "common/a.h"\n',
        "images/pre_puller.h": '#include "images/image_source.h"\n',
        "runtime/runner/gate.cc": '#include "images/image_source.h"\n#include "common/a.h"\n#include "runtime/pod/p.h"\n',
        "runtime/runner/gate_test.cc": '#include "images/pre_puller.h"\n',  # tests are exempt
        "daemon/main.cc": '#include "images/pre_puller.h"\n',
        "tools/cli.cc": '#include "runtime/containerd/client.h"\n',       # a subfolder named in the row
    })
    assert check(ok) == [], check(ok)
    bad = tree({
        "common/a.h": '#include "images/pre_puller.h"\n',               # common may depend on nothing
        "runtime/runner/gate.cc": '#include "images/pre_puller.h"\n',   # only the interface is allowed
        "images/x.cc": '#include "runtime/pod/p.h"\n',                  # images may not use runtime
        "tools/knap.cc": '#include "runtime/pod/spec.h"\n',             # runtime/pod is not runtime/containerd
        "scripts/x.cc": "",                                              # no row for scripts/
        "images/y.cc": '#include "scripts/s.h"\n',                        # scripts/ has no row either
    })
    problems = check(bad)
    expected = ["common/a.h:1", "runtime/runner/gate.cc:1", "images/x.cc:1", "tools/knap.cc:1", "scripts/x.cc",
                "images/y.cc:1"]
    for e in expected:
        assert any(p.startswith(e) for p in problems), (e, problems)
    assert len(problems) == len(expected), problems
    print(f"self-test ok: a clean tree passes; {len(expected)} forbidden edges are each reported")


# Edges README.md's real table must refuse (issue 15 untied them): each is
# written into a copy of the table's tree and must fail the check by exit code.
REAL_FORBIDDEN = {
    "images/forbidden_edge.cc": "runtime/containerd/containerd_client.h",  # images/ uses no runtime/
    "runtime/runner/forbidden_edge.cc": "images/pre_puller.h",        # only the ImageSource interface
    "oci/forbidden_edge.cc": "images/puller.h",                       # oci/ is below images/
    "scaler/forbidden_edge.cc": "runtime/runner/pod_runner.h",        # the scaler is pure
}


def self_test_real(root):
    """Runs this script on a tree holding ROOT's README.md: clean, it passes
    (exit 0); with each forbidden include of REAL_FORBIDDEN, it exits 1 naming
    the file and line."""
    d = tempfile.mkdtemp(prefix="knap-includes-real-")
    try:
        shutil.copy(os.path.join(root, "README.md"), os.path.join(d, "README.md"))
        for path, inc in REAL_FORBIDDEN.items():
            os.makedirs(os.path.join(d, os.path.dirname(path)), exist_ok=True)
            os.makedirs(os.path.join(d, os.path.dirname(inc)), exist_ok=True)
            with open(os.path.join(d, inc), "w") as f:
                f.write("")
            with open(os.path.join(d, path), "w") as f:
                f.write("// allowed: its own folder and common\n#include \"common/status.h\"\n")
        os.makedirs(os.path.join(d, "common"), exist_ok=True)
        open(os.path.join(d, "common", "status.h"), "w").close()
        run = lambda: subprocess.run([sys.executable, os.path.abspath(__file__), d],
                                     capture_output=True, text=True, check=False)
        clean = run()
        assert clean.returncode == 0, ("a clean copy must pass", clean.stdout)
        for path, inc in REAL_FORBIDDEN.items():
            with open(os.path.join(d, path), "a") as f:
                f.write(f'#include "{inc}"\n')
        bad = run()
        assert bad.returncode == 1, ("forbidden includes must fail", bad.returncode, bad.stdout)
        for path, inc in REAL_FORBIDDEN.items():
            assert f"{path}:3: includes {inc}" in bad.stdout, (path, bad.stdout)
        print(f"self-test ok: README.md's table passes a clean tree and refuses {len(REAL_FORBIDDEN)} "
              "forbidden edges (exit 1, each file named)")
    finally:
        shutil.rmtree(d, ignore_errors=True)


def main():
    return structure_check.run(check, self_test, "includes match README.md's folder table",
                               lambda n: f"{n} include(s) break README.md's folder table", self_test_real)


if __name__ == "__main__":
    sys.exit(main())
