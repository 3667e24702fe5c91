#!/usr/bin/env python3
"""Fails on a source file over 600 lines that does not say why it is long.

    check_file_sizes.py ROOT         check the tree at ROOT; exit 1 on a violation
    check_file_sizes.py --self-test  check that a planted long file is caught

A source file is a .cc, .h, .py or .sh file under engine/, tiers/, tools/,
bindings/, tests/ or bench/. Over MAX_LINES it must carry, within its first
100 lines (its header comment), a comment that starts "Longer than 600 lines
because:" and gives the reason (ARCHITECTURE.md: one concept per file, about 600 lines at most).
"""

import os
import sys
import tempfile

MAX_LINES = 600
MARKER = "Longer than 600 lines because:"
FOLDERS = ("engine", "tiers", "tools", "bindings", "tests", "bench")
SUFFIXES = (".cc", ".h", ".py", ".sh")


def violations(root):
    found = []
    for folder in FOLDERS:
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, folder)):
            dirnames[:] = [d for d in dirnames if not d.startswith((".", "build"))]
            for name in sorted(filenames):
                if not name.endswith(SUFFIXES):
                    continue
                path = os.path.join(dirpath, name)
                with open(path, encoding="utf-8", errors="replace") as f:
                    lines = f.readlines()
                if len(lines) > MAX_LINES and not any(MARKER in ln for ln in lines[:100]):
                    found.append("%s: %d lines and no '%s' near its top" %
                                 (os.path.relpath(path, root), len(lines), MARKER))
    return found


def self_test():
    with tempfile.TemporaryDirectory() as root:
        os.makedirs(os.path.join(root, "engine"))
        os.makedirs(os.path.join(root, "tests"))
        long_body = "int x;\n" * (MAX_LINES + 1)
        files = {
            "engine/long.cc": long_body,                                          # caught
            "engine/short.cc": "int x;\n" * MAX_LINES,                             # fine
            "tests/reasoned_test.cc": "// %s one binary.\n%s" % (MARKER, long_body),  # fine
            "tests/late.py": long_body + "# %s too late\n" % MARKER,               # caught
            "engine/notes.txt": long_body,                                         # not source
        }
        for rel, text in files.items():
            with open(os.path.join(root, rel), "w") as f:
                f.write(text)
        caught = sorted(v.split(":")[0] for v in violations(root))
        if caught != ["engine/long.cc", "tests/late.py"]:
            print("self-test failed: caught %s" % caught)
            return 1
    print("self-test: the planted long files caught, the others passed")
    return 0


def main(argv):
    if argv[1:] == ["--self-test"]:
        return self_test()
    if len(argv) != 2:
        print(__doc__)
        return 2
    found = violations(argv[1])
    for v in found:
        print(v)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
