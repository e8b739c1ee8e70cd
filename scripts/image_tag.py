#!/usr/bin/env python3
"""Prints the sandbox image's tag for this checkout, as the file-agent binary built from it
names it (`config::image::default_tag`): `file-agent-sandbox:` and the first 12 hex digits of a
SHA-256 over each file of sandbox-image/ in sorted order, as the length of its path (8 bytes,
little-endian), the path, the length of its bytes and the bytes. Names starting with `.` and
`__pycache__` folders are left out, as the unit test that checks the compiled-in list does.
With SANDBOX_EXTRA_PACKAGES set, the bytes of the list it names follow, as `extra-packages.txt`
(the binary's `config::image::tag` with an extra list).

It lets scripts/bootstrap.sh and scripts/test-setup.sh start the image build while cargo still
compiles the binary; the binary's `image build` afterwards confirms the tag (a unit test,
`sandbox::image::tests::the_tag_script_names_the_binarys_tag`, keeps the two in step).
Usage: scripts/image_tag.py [SANDBOX_IMAGE_FOLDER]
"""
import hashlib
import os
import sys


def files(folder, prefix=""):
    for name in os.listdir(folder):
        if name.startswith(".") or name == "__pycache__":
            continue
        path = os.path.join(folder, name)
        if os.path.isdir(path):
            yield from files(path, prefix + name + "/")
        else:
            yield prefix + name, path


def tag(folder, extra_list=None):
    entries = sorted(files(folder))
    if extra_list:
        entries.append(("extra-packages.txt", extra_list))
    digest = hashlib.sha256()
    for name, path in entries:
        with open(path, "rb") as handle:
            content = handle.read()
        encoded = name.encode()
        digest.update(len(encoded).to_bytes(8, "little") + encoded)
        digest.update(len(content).to_bytes(8, "little") + content)
    return "file-agent-sandbox:" + digest.hexdigest()[:12]


if __name__ == "__main__":
    here = os.path.dirname(os.path.abspath(__file__))
    folder = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "..", "sandbox-image")
    print(tag(folder, os.environ.get("SANDBOX_EXTRA_PACKAGES", "").strip() or None))
