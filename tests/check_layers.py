#!/usr/bin/env python3
"""Fails on an include that points up the layers of ARCHITECTURE.md.

    check_layers.py ROOT         check the tree at ROOT; exit 1 on a violation
    check_layers.py --self-test  check that planted violations are caught

Layers, lowest first; a file may include its own layer and those below:
  base   engine/base/, and the public headers it implements
  plan   engine/plan/, and the plan and policy headers
  tiers  tiers/
  store  engine/store/, and store.h, store_options.h, store_stats.h,
         live_store.h
  edge   tools/ (the CLI) and bindings/ (the Python package)
  tests  tests/: anything but bench/
  bench  bench/: anything
Every public header (engine/include/opt4store/) must be given a layer below,
so a new one cannot slip in unclassified. Includes with ".." are refused.
"""

import os
import re
import sys
import tempfile

LAYERS = ("base", "plan", "tiers", "store", "edge", "tests", "bench")
RANK = {name: i for i, name in enumerate(LAYERS)}

PUBLIC = {
    "status.h": "base", "huge_page_allocator.h": "base", "number_file.h": "base",
    "value.h": "base", "read_sink.h": "base", "sizes.h": "base", "ram_units.h": "base",
    "plan.h": "plan", "next_use.h": "plan", "item_sizes.h": "plan", "policy.h": "plan",
    "simulator.h": "plan", "cluster_plan.h": "plan", "cluster_simulator.h": "plan",
    "store.h": "store", "store_stats.h": "store", "store_options.h": "store",
    "live_store.h": "store",
}

FOLDERS = (  # path prefix -> layer, longest first
    ("engine/include/opt4store/", None),  # per header, from PUBLIC
    ("engine/base/", "base"), ("engine/plan/", "plan"), ("engine/store/", "store"),
    ("tiers/", "tiers"), ("tools/", "edge"), ("bindings/", "edge"),
    ("tests/", "tests"), ("bench/", "bench"),
)

INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)


def layer_of(path):
    """The layer of a file named from the root, or None if outside them."""
    for prefix, layer in FOLDERS:
        if path.startswith(prefix):
            if layer is None:
                return PUBLIC.get(path[len(prefix):], "unclassified")
            return layer
    return None


def resolve(includer, name):
    """The root-relative path an include names."""
    if name.startswith("opt4store/"):
        return "engine/include/" + name
    if name.split("/")[0] in ("engine", "tiers", "tools", "bindings", "tests", "bench"):
        return name
    return os.path.normpath(os.path.join(os.path.dirname(includer), name))


def check(root):
    errors = []
    for header in sorted(os.listdir(os.path.join(root, "engine/include/opt4store"))):
        if header not in PUBLIC:
            errors.append("engine/include/opt4store/%s: public header with no layer "
                          "(add it to PUBLIC in tests/check_layers.py)" % header)
    for folder, _ in FOLDERS:
        top = os.path.join(root, folder)
        for dirpath, _, names in os.walk(top):
            for name in sorted(names):
                if not name.endswith((".h", ".cc")):
                    continue
                path = os.path.relpath(os.path.join(dirpath, name), root)
                mine = layer_of(path)
                if mine is None or mine == "unclassified":
                    continue
                with open(os.path.join(root, path), encoding="utf-8") as f:
                    text = f.read()
                for included in INCLUDE.findall(text):
                    if ".." in included.split("/"):
                        errors.append("%s: includes \"%s\" through '..'" % (path, included))
                        continue
                    target = resolve(path, included)
                    theirs = layer_of(target)
                    if theirs is None:
                        continue
                    if theirs == "bench" and mine != "bench":
                        errors.append("%s (%s) includes \"%s\" from bench/" % (path, mine, included))
                    elif theirs != "unclassified" and RANK[theirs] > RANK[mine]:
                        errors.append("%s (%s) includes \"%s\" (%s): an upward include"
                                      % (path, mine, included, theirs))
    return errors


def self_test():
    planted = {
        "engine/include/opt4store/status.h": "",
        "engine/include/opt4store/store.h": '#include "opt4store/status.h"\n',
        "engine/base/env.cc": '#include "opt4store/store.h"\n',       # base -> store
        "tiers/ram_tier.cc": '#include "engine/store/manifest.h"\n',  # tiers -> store
        "engine/store/manifest.h": '#include "tiers/ram_tier.h"\n',   # fine
        "tests/a_test.cc": '#include "bench/bench_common.h"\n',       # tests -> bench
        "tools/x.cc": '#include "../engine/base/env.h"\n',            # '..'
    }
    with tempfile.TemporaryDirectory() as root:
        for path, text in planted.items():
            os.makedirs(os.path.dirname(os.path.join(root, path)), exist_ok=True)
            with open(os.path.join(root, path), "w", encoding="utf-8") as f:
                f.write(text)
        errors = check(root)
    caught = ("engine/base/env.cc", "tiers/ram_tier.cc", "tests/a_test.cc", "tools/x.cc")
    missed = [p for p in caught if not any(e.startswith(p + " ") or e.startswith(p + ":")
                                           for e in errors)]
    extra = [e for e in errors if not e.startswith(caught)]
    if missed or extra or len(errors) != len(caught):
        print("self-test failed: missed %s, unexpected %s" % (missed, extra))
        return 1
    print("self-test: %d planted violations caught" % len(caught))
    return 0


def main(argv):
    if argv[1:] == ["--self-test"]:
        return self_test()
    if len(argv) != 2:
        print(__doc__.strip())
        return 2
    errors = check(argv[1])
    for e in errors:
        print(e)
    if errors:
        print("%d upward or unclassified includes (layers: ARCHITECTURE.md)" % len(errors))
        return 1
    print("layers: no upward include")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
