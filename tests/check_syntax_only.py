#!/usr/bin/env python3
"""Runs every translation unit of a CMake build through its compiler with
-fsyntax-only: what a compile would diagnose, without code generation or a
link. build.sh's thread-safety check uses it, since clang's analysis runs in
the front end and nothing of that build is linked or run.

    check_syntax_only.py COMPILE_COMMANDS_JSON JOBS

Prints each unit's diagnostics; exit 1 when any unit fails.
"""

import json
import shlex
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor


def check(entry):
    """(exit status, output) of one unit's compile command, with -c made
    -fsyntax-only and its -o dropped."""
    args = shlex.split(entry["command"])
    del args[args.index("-o"):args.index("-o") + 2]
    args[args.index("-c")] = "-fsyntax-only"
    done = subprocess.run(args, cwd=entry["directory"], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)
    return done.returncode, done.stdout


def main(compile_commands, jobs):
    with open(compile_commands) as f:
        entries = json.load(f)
    failed = 0
    with ThreadPoolExecutor(jobs) as pool:
        for status, output in pool.map(check, entries):
            sys.stdout.write(output)
            failed += status != 0
    print(f"{len(entries)} translation units checked, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], int(sys.argv[2])))
