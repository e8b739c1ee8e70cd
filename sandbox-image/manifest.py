"""The sandbox image's manifest: what an attempt can import, made at build time by the image's own
interpreter, once the wheels are in place (both builds run it as their last Python step).

Usage: ``python3 -I manifest.py SITE_PACKAGES EXTRA_LIST LIST_NAME > /opt/file-agent/packages.json``

It writes one JSON object: ``python`` (the interpreter's version), ``extra_list`` (``name``: the
list's path as the build was given it, ``sha256`` of its bytes; null without one) and
``packages``: every distribution installed in SITE_PACKAGES, sorted by name, each with ``name``,
``version``, ``import`` (the top-level modules it provides) and ``extra`` (true for the packages
of the operator's list, false for the base set). file-agent reads it to tell the model what it
can import, and ``doctor`` to show it.
"""

import hashlib
import importlib.metadata
import json
import re
import sys


def normalise(name):
    return re.sub(r"[-_.]+", "-", name).lower()


def extra_names(path):
    """The normalised names the extra list pins (``name==version`` at a line's start)."""
    names = set()
    if not path:
        return names
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*==", line)
            if match:
                names.add(normalise(match.group(1)))
    return names


def top_level(distribution):
    """The top-level modules of ``distribution``: its top_level.txt, else its RECORD's first
    path parts (packages and single-file modules, not its metadata or data folders)."""
    text = distribution.read_text("top_level.txt")
    if text:
        return sorted({name.strip() for name in text.split() if name.strip()})
    found = set()
    for file in distribution.files or ():
        first = file.parts[0]
        if first.endswith((".dist-info", ".data")) or first in ("..", "__pycache__"):
            continue
        if len(file.parts) > 1 or first.endswith(".py"):
            name = first[:-3] if first.endswith(".py") else first
            if name.isidentifier():
                found.add(name)
    return sorted(found)


def main(site, extra_list, list_name):
    extras = extra_names(extra_list)
    packages = []
    for distribution in importlib.metadata.distributions(path=[site]):
        name = distribution.metadata["Name"]
        packages.append(
            {
                "name": name,
                "version": distribution.version,
                "import": top_level(distribution),
                "extra": normalise(name) in extras,
            }
        )
    packages.sort(key=lambda package: normalise(package["name"]))
    listed = None
    if extra_list:
        with open(extra_list, "rb") as handle:
            digest = hashlib.sha256(handle.read()).hexdigest()
        listed = {"name": list_name, "sha256": digest}
    json.dump(
        {"python": sys.version.split()[0], "extra_list": listed, "packages": packages},
        sys.stdout,
        indent=1,
    )
    sys.stdout.write("\n")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "", sys.argv[3] if len(sys.argv) > 3 else "")
