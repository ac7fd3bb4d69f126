"""The command line every tests/structure check shares.

A check is a function from the source root to a list of problems (one line
each); its self-test proves, on a tree it builds itself, that the check
passes a clean tree and names each forbidden case. `run` parses
`[--self-test [ROOT]] | [ROOT]`, prints the problems and returns the exit
code (1 when there are any).
"""

import os
import sys


def run(check, self_test, ok, failed, self_test_with_root=None):
    """`ok`: the line printed when nothing is wrong; `failed(n)`: the last line when n things are.
    `self_test_with_root(root)`: an extra self-test on the real tree, when the caller passes it one."""
    args = sys.argv[1:]
    if args and args[0] == "--self-test":
        self_test()
        if len(args) == 2 and self_test_with_root:
            self_test_with_root(args[1])
        return 0
    root = args[0] if args else os.path.join(os.path.dirname(__file__), "..", "..")
    problems = check(root)
    for p in problems:
        print(p)
    if problems:
        print(failed(len(problems)))
        return 1
    print(ok)
    return 0
