"""An independent verifier for file-agent's signed audit-trail checkpoints and Merkle proofs.

Written only from the public texts: C2SP signed-note (c2sp.org/signed-note@v1.0.0),
tlog-checkpoint (c2sp.org/tlog-checkpoint@v1.0.0), tlog-cosignature (c2sp.org/tlog-cosignature,
the Ed25519 cosignature/v1 type) and RFC 6962 / RFC 9162 section 2.1 (Merkle tree hashes,
inclusion and consistency proofs), independently of file-agent's Rust code, so that the two can
check each other. Needs Python 3.11 and `cryptography` (Ed25519); `scripts/test-python.sh`
makes the venv target/test-python that has it.

Usage (every subcommand prints one JSON object on stdout, {"ok": true, ...} or
{"ok": false, "error": "..."}, and exits 0 or 1):

  tlog_verify.py selftest
  tlog_verify.py checkpoint --key VKEY [--witness-key VKEY]...  < signed checkpoint note
  tlog_verify.py inclusion --key VKEY [--witness-key VKEY]... [--line-file PATH]  < JSON
      {"origin", "leaf_index", "leaf_hash", "tree_size", "inclusion_proof", "checkpoint"}
  tlog_verify.py consistency --key VKEY  < JSON
      {"origin", "old_size", "new_size", "consistency_proof", "old_checkpoint", "new_checkpoint"}
  tlog_verify.py receipt --key VKEY [--witness-key VKEY]... [--line-file PATH] [--origin NAME]  < JSON
      a saved receipt: one {"origin", "leaf_index", "leaf_hash", "line", "tree_size",
      "inclusion_proof", "checkpoint"} (or {"unsigned": why}), a list of them, an object holding
      the list under "io.file-agent/receipts" (a result's _meta), or a result holding that _meta
  tlog_verify.py root  < audit lines (JSONL)

VKEY is a C2SP verifier key "<name>+<8 hex key id>+<base64(type byte || 32-byte key)>": type
0x01 (Ed25519 note signature) for --key, 0x04 (Ed25519 cosignature/v1) for --witness-key.
Hashes are standard padded base64 of 32 bytes. A leaf is one audit line's bytes without its
"\\n": leaf hash = SHA-256(0x00 || line).
"""

import argparse
import base64
import hashlib
import json
import re
import sys
from dataclasses import dataclass

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey


class VerifyError(Exception):
    """Anything malformed or not verifying; the message is the JSON "error"."""


def sha256(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


# Standard (RFC 4648 section 4) base64 with padding, as signed-note's conventions require.
# Decoding is strict: only that alphabet, correct padding, and canonical (re-encodes the same).
_B64 = re.compile(r"(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?")


def b64decode(s: str, what: str) -> bytes:
    if not isinstance(s, str) or not _B64.fullmatch(s):
        raise VerifyError(f"{what}: not standard padded base64")
    raw = base64.b64decode(s)
    if b64encode(raw) != s:
        raise VerifyError(f"{what}: non-canonical base64")
    return raw


def b64encode(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")


def decode_hash(s, what: str) -> bytes:
    raw = b64decode(s, what)
    if len(raw) != 32:
        raise VerifyError(f"{what}: {len(raw)} bytes, want a 32-byte SHA-256 hash")
    return raw


# ---- signed-note (c2sp.org/signed-note) ------------------------------------------------------

ALG_ED25519 = 0x01  # "Ed25519 signatures as specified by this document" (over the note text)
ALG_COSIGNATURE_V1 = 0x04  # timestamped Ed25519 checkpoint cosignatures (tlog-cosignature)
EM_DASH = "\u2014"
MAX_SIGNATURES = 100  # "Verifiers SHOULD apply a maximum limit ... MUST accept at least up to 16"


def valid_key_name(name: str) -> bool:
    # "Key names MUST be non-empty and MUST NOT contain any Unicode spaces or plus (U+002B)";
    # control characters could never appear in a valid note either.
    return bool(name) and not any(c.isspace() or c == "+" or c < " " for c in name)


def key_id(name: str, alg: int, public_key: bytes) -> int:
    # "key ID = SHA-256(key name || 0x0A || signature type || public key)[:4]", big-endian
    return int.from_bytes(sha256(name.encode() + b"\n" + bytes([alg]) + public_key)[:4], "big")


@dataclass(frozen=True)
class Key:
    name: str
    key_id: int
    alg: int
    public_key: bytes  # 32-byte RFC 8032 Ed25519 public key

    def label(self) -> str:
        return f"{self.name}+{self.key_id:08x}"

    def vkey(self) -> str:
        return f"{self.label()}+{b64encode(bytes([self.alg]) + self.public_key)}"


def make_key(name: str, alg: int, public_key: bytes) -> Key:
    return Key(name, key_id(name, alg, public_key), alg, public_key)


def parse_vkey(vkey: str, want_alg: int | None = None) -> Key:
    """Verifier key: <key name>+hex(32-bit key ID)+base64(signature type || public key)."""
    # The name has no "+", the hex none either; the base64 may contain "+", so split twice only.
    parts = vkey.split("+", 2)
    if len(parts) != 3:
        raise VerifyError("verifier key: want <name>+<key id>+<base64 key>")
    name, hex_id, key64 = parts
    if not valid_key_name(name):
        raise VerifyError("verifier key: invalid key name")
    if not re.fullmatch(r"[0-9a-f]{8}", hex_id):  # fixed-length lowercase hex
        raise VerifyError("verifier key: key id is not 8 lowercase hex digits")
    material = b64decode(key64, "verifier key")
    if len(material) != 33:
        raise VerifyError("verifier key: want a type byte and a 32-byte Ed25519 key")
    alg, public_key = material[0], material[1:]
    if alg not in (ALG_ED25519, ALG_COSIGNATURE_V1):
        raise VerifyError(f"verifier key: unsupported signature type 0x{alg:02x}")
    if want_alg is not None and alg != want_alg:
        raise VerifyError(f"verifier key {name}: signature type 0x{alg:02x}, want 0x{want_alg:02x}")
    key = make_key(name, alg, public_key)
    if f"{key.key_id:08x}" != hex_id:
        raise VerifyError(f"verifier key {name}: key id {hex_id} does not match the key")
    return key


@dataclass(frozen=True)
class Signature:
    name: str
    key_id: int
    signature: bytes  # the bytes after the 4-byte key id


@dataclass(frozen=True)
class Note:
    text: str  # includes its final "\n", not the blank separator line
    signatures: tuple[Signature, ...]


def parse_note(data: bytes) -> Note:
    def malformed(why: str) -> VerifyError:
        return VerifyError(f"malformed note: {why}")

    # "Signed notes MUST be valid UTF-8 and MUST NOT contain any ASCII control characters
    # (those below U+0020) other than newline."
    try:
        s = data.decode("utf-8")
    except UnicodeDecodeError:
        raise malformed("not valid UTF-8") from None
    for i, c in enumerate(s):
        if c < " " and c != "\n":
            raise malformed(f"control character U+{ord(c):04X} at {i}")
    # "the text is separated from the signatures by the last empty line in the note"
    split = s.rfind("\n\n")
    if split < 0:
        raise malformed("no blank line before the signatures")
    text, block = s[: split + 1], s[split + 2 :]
    if not block:
        raise malformed("no signature lines")
    if not block.endswith("\n"):
        raise malformed("the last signature line does not end in a newline")
    lines = block[:-1].split("\n")
    if len(lines) > MAX_SIGNATURES:
        raise malformed(f"more than {MAX_SIGNATURES} signature lines")
    signatures = []
    for line in lines:
        # em dash (U+2014), space, key name, space, base64-encoded signature, newline
        if not line.startswith(EM_DASH + " "):
            raise malformed(f"not a signature line: {line[:40]!r}")
        name, space, sig64 = line[2:].partition(" ")
        if not space or not valid_key_name(name):
            raise malformed(f"bad key name in signature line: {line[:40]!r}")
        try:
            raw = b64decode(sig64, "signature")
        except VerifyError as e:
            raise malformed(str(e)) from None
        if len(raw) < 5:  # 4-byte key id and a non-empty signature
            raise malformed("signature too short")
        signatures.append(Signature(name, int.from_bytes(raw[:4], "big"), raw[4:]))
    return Note(text, tuple(signatures))


def cosignature_message(timestamp: int, text: bytes) -> bytes:
    # tlog-cosignature "Ed25519 signed message": "cosignature/v1\n", "time <decimal>\n", then
    # the whole note text (with its final newline, without any signature lines)
    return b"cosignature/v1\ntime %d\n" % timestamp + text


def _check_signature(key: Key, text: bytes, sig: bytes) -> int | None:
    """Checks one signature line from a known key; returns the cosignature's timestamp."""
    invalid = VerifyError(f"invalid signature for key {key.label()}")
    timestamp = None
    if key.alg == ALG_ED25519:
        if len(sig) != 64:
            raise invalid
        message, ed_sig = text, sig
    else:  # ALG_COSIGNATURE_V1: timestamped_signature = u64 BE timestamp || 64-byte Ed25519
        if len(sig) != 72:
            raise invalid
        timestamp = int.from_bytes(sig[:8], "big")
        if timestamp > 2**63 - 1:  # "It MUST NOT exceed 2^63 - 1"
            raise invalid
        message, ed_sig = cosignature_message(timestamp, text), sig[8:]
    try:
        Ed25519PublicKey.from_public_bytes(key.public_key).verify(ed_sig, message)
    except (InvalidSignature, ValueError):
        raise invalid from None
    return timestamp


def verify_note(note: Note, keys: list[Key]) -> dict[Key, int | None]:
    """Returns the keys whose signatures verified (with cosignature timestamps).

    signed-note "Signatures": signatures whose (name, key ID) match no known key are ignored; one
    that matches is verified and, if it fails, the whole note is rejected (every such line is
    checked, repeats included); a note with no verified known-key signature is rejected.
    """
    known: dict[tuple[str, int], Key] = {}
    for key in keys:
        if known.setdefault((key.name, key.key_id), key) != key:
            raise VerifyError(f"ambiguous key {key.label()}")
    text = note.text.encode()
    verified: dict[Key, int | None] = {}
    for sig in note.signatures:
        key = known.get((sig.name, sig.key_id))
        if key is not None:
            verified[key] = _check_signature(key, text, sig.signature)
    if not verified:
        raise VerifyError("note has no verifiable signatures")
    return verified


def note_bytes(s: str, what: str) -> bytes:
    try:
        return s.encode("utf-8")
    except UnicodeEncodeError:
        raise VerifyError(f"{what}: not valid UTF-8") from None


# ---- RFC 6962 / RFC 9162 section 2.1 Merkle trees ---------------------------------------------

EMPTY_ROOT = sha256(b"")  # MTH({}) = SHA-256()


def leaf_hash(data: bytes) -> bytes:
    return sha256(b"\x00" + data)  # MTH({d(0)}) = SHA-256(0x00 || d(0))


def node_hash(left: bytes, right: bytes) -> bytes:
    return sha256(b"\x01" + left + right)


def _split(n: int) -> int:
    k = 1  # the largest power of two smaller than n (n > 1): k < n <= 2k
    while k * 2 < n:
        k *= 2
    return k


def mth(hashes: list[bytes], lo: int = 0, hi: int | None = None) -> bytes:
    """RFC 6962 2.1 MTH(D[lo:hi]), given the leaf hashes (MTH of one leaf is its leaf hash)."""
    hi = len(hashes) if hi is None else hi
    n = hi - lo
    if n == 0:
        return EMPTY_ROOT
    if n == 1:
        return hashes[lo]
    k = _split(n)
    return node_hash(mth(hashes, lo, lo + k), mth(hashes, lo + k, hi))


def inclusion_path(m: int, hashes: list[bytes], lo: int = 0, hi: int | None = None) -> list[bytes]:
    """RFC 6962 2.1.1 PATH(m, D[n]), leaf side first."""
    hi = len(hashes) if hi is None else hi
    n = hi - lo
    if n == 1:
        return []
    k = _split(n)
    if m < k:
        return inclusion_path(m, hashes, lo, lo + k) + [mth(hashes, lo + k, hi)]
    return inclusion_path(m - k, hashes, lo + k, hi) + [mth(hashes, lo, lo + k)]


def consistency_proof(m: int, hashes: list[bytes]) -> list[bytes]:
    """RFC 6962 2.1.2 PROOF(m, D[n]) = SUBPROOF(m, D[n], true), for 0 < m <= n."""

    def subproof(m: int, lo: int, hi: int, b: bool) -> list[bytes]:
        n = hi - lo
        if m == n:
            return [] if b else [mth(hashes, lo, hi)]
        k = _split(n)
        if m <= k:
            return subproof(m, lo, lo + k, b) + [mth(hashes, lo + k, hi)]
        return subproof(m - k, lo + k, hi, False) + [mth(hashes, lo, lo + k)]

    return subproof(m, 0, len(hashes), True)


def verify_inclusion(leaf_index: int, tree_size: int, hash_: bytes, path: list[bytes],
                     root: bytes) -> bool:
    """RFC 9162 2.1.3.2, step by step."""
    if leaf_index >= tree_size:  # 1.
        return False
    fn, sn = leaf_index, tree_size - 1  # 2.
    r = hash_  # 3.
    for p in path:  # 4.
        if sn == 0:  # 4a.
            return False
        if fn & 1 or fn == sn:  # 4b.
            r = node_hash(p, r)
            if not fn & 1:
                while not (fn & 1 or fn == 0):
                    fn, sn = fn >> 1, sn >> 1
        else:
            r = node_hash(r, p)
        fn, sn = fn >> 1, sn >> 1  # 4c.
    return sn == 0 and r == root  # 5.


def verify_consistency(first: int, second: int, first_hash: bytes, second_hash: bytes,
                       path: list[bytes]) -> bool:
    """RFC 9162 2.1.4.2, step by step, plus the cases it leaves out (first == second, first == 0)."""
    if first > second:
        return False
    if first == second:  # the same tree: nothing to prove, the roots must be equal
        return not path and first_hash == second_hash
    if first == 0:  # every tree extends the empty one, whose root is MTH({})
        return not path and first_hash == EMPTY_ROOT
    if not path:  # 1.
        return False
    path = list(path)
    if first & (first - 1) == 0:  # 2. first is an exact power of 2
        path.insert(0, first_hash)
    fn, sn = first - 1, second - 1  # 3.
    while fn & 1:  # 4.
        fn, sn = fn >> 1, sn >> 1
    fr = sr = path[0]  # 5.
    for c in path[1:]:  # 6.
        if sn == 0:  # 6a.
            return False
        if fn & 1 or fn == sn:  # 6b.
            fr, sr = node_hash(c, fr), node_hash(c, sr)
            if not fn & 1:
                while not (fn & 1 or fn == 0):
                    fn, sn = fn >> 1, sn >> 1
        else:
            sr = node_hash(sr, c)
        fn, sn = fn >> 1, sn >> 1  # 6c.
    return fr == first_hash and sr == second_hash and sn == 0  # 7.


# ---- tlog-checkpoint (c2sp.org/tlog-checkpoint) ----------------------------------------------


@dataclass(frozen=True)
class Checkpoint:
    origin: str
    size: int
    root: bytes
    extensions: tuple[str, ...]


def parse_checkpoint(text: str) -> Checkpoint:
    """Note text: origin, tree size, root hash, then optional extension lines, all non-empty."""
    if not text.endswith("\n"):
        raise VerifyError("checkpoint: the text does not end in a newline")
    lines = text[:-1].split("\n")
    if len(lines) < 3:
        raise VerifyError("checkpoint: fewer than three lines")
    origin, size_line, root_line, *extensions = lines
    if not origin:
        raise VerifyError("checkpoint: empty origin line")
    # "ASCII decimal ... with no leading zeroes (unless the tree is empty ... 0)"
    if not re.fullmatch(r"0|[1-9][0-9]*", size_line) or int(size_line) >= 2**64:
        raise VerifyError(f"checkpoint: bad tree size {size_line[:30]!r}")
    size = int(size_line)
    root = decode_hash(root_line, "checkpoint root hash")
    if any(not line for line in extensions):
        raise VerifyError("checkpoint: empty extension line")
    if size == 0 and root != EMPTY_ROOT:  # the RFC 6962 root of the empty tree is MTH({})
        raise VerifyError("checkpoint: an empty tree's root must be SHA-256 of nothing")
    return Checkpoint(origin, size, root, tuple(extensions))


def open_checkpoint(data: bytes, log_key: Key, witnesses: list[Key]) -> tuple[Checkpoint, list[str]]:
    """Verifies a signed checkpoint: the log's signature, and a cosignature from each witness."""
    note = parse_note(data)
    verified = verify_note(note, [log_key, *witnesses])
    if log_key not in verified:
        raise VerifyError(f"checkpoint has no signature from the log key {log_key.label()}")
    checkpoint = parse_checkpoint(note.text)
    cosigned = [w.name for w in witnesses if w in verified]
    missing = [w.label() for w in witnesses if w not in verified]
    if missing:
        raise VerifyError(
            f"no cosignature from witness {', '.join(missing)}"
            f" (cosigned by: {', '.join(cosigned) or 'none'})"
        )
    return checkpoint, cosigned


# ---- the subcommands ------------------------------------------------------------------------


def read_json_object() -> dict:
    def no_duplicates(pairs):
        keys = [k for k, _ in pairs]
        if len(set(keys)) != len(keys):
            raise VerifyError("stdin: duplicate key in a JSON object")
        return dict(pairs)

    try:
        value = json.loads(sys.stdin.buffer.read(), object_pairs_hook=no_duplicates)
    except ValueError as e:
        raise VerifyError(f"stdin is not JSON: {e}") from None
    if not isinstance(value, dict):
        raise VerifyError("stdin: want a JSON object")
    return value


def field(obj: dict, name: str, kind: type):
    if name not in obj:
        raise VerifyError(f"missing field {name!r}")
    value = obj[name]
    if type(value) is not kind:  # (so no bools or floats for integers)
        raise VerifyError(f"field {name!r}: want a {kind.__name__}")
    if kind is int and not 0 <= value < 2**64:
        raise VerifyError(f"field {name!r}: out of range")
    return value


def hash_list(obj: dict, name: str) -> list[bytes]:
    return [decode_hash(h, f"{name}[{i}]") for i, h in enumerate(field(obj, name, list))]


def cmd_checkpoint(args) -> dict:
    log_key = parse_vkey(args.key, ALG_ED25519)
    witnesses = [parse_vkey(w, ALG_COSIGNATURE_V1) for w in args.witness_key]
    cp, cosigned = open_checkpoint(sys.stdin.buffer.read(), log_key, witnesses)
    return {"origin": cp.origin, "size": cp.size, "root": b64encode(cp.root), "cosigned_by": cosigned}


def cmd_inclusion(args) -> dict:
    log_key = parse_vkey(args.key, ALG_ED25519)
    witnesses = [parse_vkey(w, ALG_COSIGNATURE_V1) for w in args.witness_key]
    obj = read_json_object()
    origin = field(obj, "origin", str)
    index = field(obj, "leaf_index", int)
    size = field(obj, "tree_size", int)
    hash_ = decode_hash(field(obj, "leaf_hash", str), "leaf_hash")
    path = hash_list(obj, "inclusion_proof")
    note = note_bytes(field(obj, "checkpoint", str), "checkpoint")
    cp, cosigned = open_checkpoint(note, log_key, witnesses)
    if cp.origin != origin:
        raise VerifyError(f"origin {origin!r} is not the checkpoint's {cp.origin!r}")
    if cp.size != size:
        raise VerifyError(f"tree_size {size} is not the checkpoint's {cp.size}")
    if args.line_file is not None:
        with open(args.line_file, "rb") as f:
            line = f.read()
        if line.endswith(b"\n"):
            raise VerifyError("--line-file ends in a newline; it must hold the line without it")
        if leaf_hash(line) != hash_:
            raise VerifyError("leaf_hash is not SHA-256(0x00 || the line in --line-file)")
    if not verify_inclusion(index, size, hash_, path, cp.root):
        raise VerifyError(f"inclusion proof for leaf {index} in tree size {size} does not verify")
    return {
        "origin": cp.origin,
        "tree_size": cp.size,
        "leaf_index": index,
        "root": b64encode(cp.root),
        "line_checked": args.line_file is not None,
        "cosigned_by": cosigned,
    }


def cmd_consistency(args) -> dict:
    log_key = parse_vkey(args.key, ALG_ED25519)
    obj = read_json_object()
    origin = field(obj, "origin", str)
    old_size = field(obj, "old_size", int)
    new_size = field(obj, "new_size", int)
    path = hash_list(obj, "consistency_proof")
    old, _ = open_checkpoint(note_bytes(field(obj, "old_checkpoint", str), "old_checkpoint"), log_key, [])
    new, _ = open_checkpoint(note_bytes(field(obj, "new_checkpoint", str), "new_checkpoint"), log_key, [])
    for which, cp, size in (("old", old, old_size), ("new", new, new_size)):
        if cp.origin != origin:
            raise VerifyError(f"origin {origin!r} is not the {which} checkpoint's {cp.origin!r}")
        if cp.size != size:
            raise VerifyError(f"{which}_size {size} is not the {which} checkpoint's {cp.size}")
    if not verify_consistency(old.size, new.size, old.root, new.root, path):
        raise VerifyError(f"consistency proof from size {old.size} to {new.size} does not verify")
    return {
        "origin": origin,
        "old_size": old.size,
        "new_size": new.size,
        "old_root": b64encode(old.root),
        "new_root": b64encode(new.root),
    }


RECEIPTS_META = "io.file-agent/receipts"


def receipt_entries(value) -> list[dict]:
    """The receipts in a saved receipt: an entry, a list, a _meta object, or a result."""
    if isinstance(value, dict) and "_meta" in value:
        value = value["_meta"]
    if isinstance(value, dict) and RECEIPTS_META in value:
        value = value[RECEIPTS_META]
    if isinstance(value, dict):
        value = [value]
    if not isinstance(value, list) or not value or not all(isinstance(e, dict) for e in value):
        raise VerifyError("stdin: want a receipt, a list of receipts, or a result's _meta")
    return value


def check_receipt(obj: dict, log_key: Key, witnesses: list[Key], prefix: str,
                  line_file: bytes | None) -> dict:
    if "unsigned" in obj:
        raise VerifyError(f"the receipt is unsigned: {field(obj, 'unsigned', str)}")
    origin = field(obj, "origin", str)
    index = field(obj, "leaf_index", int)
    size = field(obj, "tree_size", int)
    hash_ = decode_hash(field(obj, "leaf_hash", str), "leaf_hash")
    path = hash_list(obj, "inclusion_proof")
    cp, cosigned = open_checkpoint(note_bytes(field(obj, "checkpoint", str), "checkpoint"),
                                   log_key, witnesses)
    if cp.origin != origin:
        raise VerifyError(f"origin {origin!r} is not the checkpoint's {cp.origin!r}")
    chain = cp.origin[len(prefix) + 1:] if cp.origin.startswith(prefix + "/") else ""
    if not re.fullmatch(r"[A-Za-z0-9._-]+", chain):
        raise VerifyError(f"the checkpoint's origin {cp.origin!r} is not a chain of {prefix!r}")
    if cp.size != size:
        raise VerifyError(f"tree_size {size} is not the checkpoint's {cp.size}")
    if not verify_inclusion(index, size, hash_, path, cp.root):
        raise VerifyError(f"inclusion proof for leaf {index} in tree size {size} does not verify")
    line = line_file
    if line is None and "line" in obj:
        line = field(obj, "line", str).encode()
    if line is not None and leaf_hash(line) != hash_:
        raise VerifyError("leaf_hash is not SHA-256(0x00 || the line)")
    return {"origin": cp.origin, "leaf_index": index, "tree_size": cp.size,
            "line_checked": line is not None, "cosigned_by": cosigned}


def cmd_receipt(args) -> dict:
    log_key = parse_vkey(args.key, ALG_ED25519)
    witnesses = [parse_vkey(w, ALG_COSIGNATURE_V1) for w in args.witness_key]
    try:
        value = json.loads(sys.stdin.buffer.read())
    except ValueError as e:
        raise VerifyError(f"stdin is not JSON: {e}") from None
    entries = receipt_entries(value)
    line = None
    if args.line_file is not None:
        if len(entries) != 1:
            raise VerifyError("--line-file checks one receipt; give a file of one")
        with open(args.line_file, "rb") as f:
            line = f.read()
        if line.endswith(b"\n"):
            raise VerifyError("--line-file ends in a newline; it must hold the line without it")
    prefix = args.origin or log_key.name
    return {"receipts": [check_receipt(e, log_key, witnesses, prefix, line) for e in entries]}


def cmd_root(args) -> dict:
    data = sys.stdin.buffer.read()
    lines = data.split(b"\n")
    if lines[-1] == b"":  # the final line's "\n" (a last line without one still counts)
        lines.pop()
    for i, line in enumerate(lines):
        if not line:
            raise VerifyError(f"empty audit line at line {i + 1}")
    hashes = [leaf_hash(line) for line in lines]
    return {"size": len(hashes), "root": b64encode(mth(hashes))}


# ---- selftest: the known answers -------------------------------------------------------------

# RFC 6962 test leaves (transparency-dev/merkle testonly) and their tree's node hashes.
LEAVES = [bytes.fromhex(h) for h in ["", "00", "10", "2021", "3031", "40414243", "5051525354555657",
                                     "606162636465666768696a6b6c6d6e6f"]]
ROOTS = [  # MTH of the first n leaves, n = 0..8
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
    "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
    "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
    "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
    "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
    "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
    "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
    "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
]
NODES = {  # (level, index) -> hash of the complete subtree of 2^level leaves at index * 2^level
    (0, 0): "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
    (0, 1): "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
    (0, 2): "0298d122906dcfc10892cb53a73992fc5b9f493ea4c9badb27b791b4127a7fe7",
    (0, 3): "07506a85fd9dd2f120eb694f86011e5bb4662e5c415a62917033d4a9624487e7",
    (0, 4): "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
    (0, 5): "4271a26be0d8a84f0bd54c8c302e7cb3a3b5d1fa6780a40bcce2873477dab658",
    (0, 6): "b08693ec2e721597130641e8211e7eedccb4c26413963eee6c1e2ed16ffb1a5f",
    (0, 7): "46f6ffadd3d06a09ff3c5860d2755c8b9819db7df44251788c7d8e3180de8eb1",
    (1, 0): "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
    (1, 1): "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
    (1, 2): "0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
    (1, 3): "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
    (2, 0): "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
    (2, 1): "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4",
    (3, 0): "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
}
MTH_4_7 = "837dbb152e9b079010717e84e865da4ebc0fa198a806d59d31bf15accef22d0e"  # MTH(D[4:7])
INCLUSION = {  # PATH(index, D[size]): published ones, then (6, 8) and (2, 5) computed by hand
    (0, 1): [], (0, 2): [(0, 1)], (1, 2): [(0, 0)], (2, 3): [(1, 0)],
    (1, 5): [(0, 0), (1, 1), (0, 4)], (0, 8): [(0, 1), (1, 1), (2, 1)],
    (5, 8): [(0, 4), (1, 3), (2, 0)], (6, 8): [(0, 7), (1, 2), (2, 0)], (2, 5): [(0, 3), (1, 0), (0, 4)],
}
CONSISTENCY = {  # PROOF(old, D[new]): published ones, then four computed by hand
    (1, 1): [], (1, 8): [(0, 1), (1, 1), (2, 1)], (2, 5): [(1, 1), (0, 4)], (6, 8): [(1, 2), (1, 3), (2, 0)],
    (3, 7): [(0, 2), (0, 3), (1, 0), MTH_4_7], (4, 7): [MTH_4_7],
    (5, 7): [(0, 4), (0, 5), (0, 6), (2, 0)], (7, 8): [(0, 6), (0, 7), (1, 2), (2, 0)],
}

# The C2SP signed-note example.
FOO_VKEY = "example.com/foo+530d903a+AekyeRrm56hApGFkyQR4ZCbV54Id2LKaANYcrnKv3U2k"
FOO_NOTE = ("This is an example message.\n\n"
            "\u2014 example.com/foo Uw2QOkn8srV1yJGh2VYRlL1Tnagv1YEq6TfXppzi2ONncAlTgK7Ztg1ERYNZXsYjOBH3mFX"
            "mRKuwHjG1Yu72IneyaQM=\n")
# golang.org/x/mod/sumdb/note note_test.go.
PETER_SKEY = "PRIVATE+KEY+PeterNeumann+c74f20a3+AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz"
PETER_VKEY = "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW"
ENOCH_VKEY = "EnochRoot+af0cfe78+ATtqJ7zOtqQtYqOo0CpvDXNlMhV3HeJDpjrASKGLWdop"
GO_TEXT = ("If you think cryptography is the answer to your problem,\n"
           "then you don't know what your problem is.\n")
PETER_SIG = ("\u2014 PeterNeumann x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfqdng"
             "otpRZb6KE6RyyBwJnAM=\n")
ENOCH_SIG = ("\u2014 EnochRoot rwz+eBzmZa0SO3NbfRGzPCpDckykFXSdeX+MNtCOXm2/5n2tiOHp+vAF1aGrQ5ovTG01oOTGwnWLo"
             "x33WWd1RvMc+QQ=\n")
GO_BAD_VKEYS = {  # (with their "adjusted key hash": the id really is the hash, so type/length fail)
    "PeterNeumann+cc469956+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TWBADKEY==": 0xCC469956,
    "PeterNeumann+173116ae+ZRpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW": 0x173116AE,
}
# Self-generated checkpoint of the 8 test leaves (deterministic Ed25519; checked against another
# implementation in the research notes) and a witness cosignature.
LOG_SEED = bytes(range(32))
LOG_PUBLIC = "03a107bff3ce10be1d70dd18e74bc09967e4d6309ba50d5f1ddc8664125531b8"
LOG_VKEY = "example.com/audit-log+07499b2d+AQOhB7/zzhC+HXDdGOdLwJln5NYwm6UNXx3chmQSVTG4"
CP_TEXT = "example.com/audit-log\n8\nXcnaeacGWamtVZy3Ad7ZoqudgjqtL0lgz+Nw7/RgQyg=\n"
CP_SIG = ("\u2014 example.com/audit-log B0mbLZLyh4863+NGjL2fjfvaQexYZxWZkzppLCjbqmguGY2Euk7E/AquVJOKG0FKm/11"
          "L34y0DGNJGXTje/dI5Y3/Q8=\n")
WITNESS_SEED = bytes([0x42] * 32)
WITNESS_PUBLIC = "2152f8d19b791d24453242e15f2eab6cb7cffa7b6a5ed30097960e069881db12"
WITNESS_VKEY = "witness.example/w1+f1ed8c47+BCFS+NGbeR0kRTJC4V8uq2y3z/p7al7TAJeWDgaYgdsS"
WITNESS_TIME = 1700000000
WITNESS_SIG = ("\u2014 witness.example/w1 8e2MRwAAAABlU/EAHJT+y+20db9Mgh2k6q2zg+rRSZM5DEY8wmPlzdju538bSnts0nI"
               "bspqJpbeBeMWdPdzaS0iW09XQR55Em5P+Dg==\n")
# Sigsum (sigsum 0.3.0 crate, sigsum-test-2025-3 policy): real cosignature/v1 signatures.
SIGSUM_LOG_PUBLIC = "47e481606d8acba747a6b053d6c2d191605fb122175d410a1202a91430abce39"
SIGSUM_BODY = ("sigsum.org/v1/tree/1643169b32bef33a3f54f8a353b87c475d19b6223cbb106390d10a29978e1cba\n"
               "381382\nkB/vxvHZeNLCvtuC1Eh1W83H6GJuZ6x+6Ahzdxvptmc=\n")
SIGSUM_TIME = 1770193051
SIGSUM_WITNESSES = [  # (name, public key, signature, the C2SP line's base64)
    ("poc.sigsum.org/nisse", "1c25f8a44c635457e2e391d1efbca7d4c2951a0aef06225a881e46b98962ac6c",
     "a1ee1182b265204499cbef3ae59f3ea228b928b3cbda8817a4ed5a12776823e9"
     "ad8ef1ce986b9b98d9954f1798ec4315c1820704600a231c69038ccc9726d202",
     "rDC+YQAAAABpgwCboe4RgrJlIESZy+865Z8+oii5KLPL2ogXpO1aEndoI+mtjvHOmGubmNmVTxeY7EMVwYIHBGAKIxxpA4zMlybS"
     "Ag=="),
    ("witness.stagemole.eu", "4a921b7caef58ae670cdc11ef4184f1c058f7b9259a9107a969f69fa54aa496f",
     "aaf642e81a54399777180f238573d74878b68c7b645d8011583621405bb450b4"
     "e7887fc76502a8142c493d64e3ed3e556d82dad1706411082e58805f64fa9d02",
     "Z/euoAAAAABpgwCbqvZC6BpUOZd3GA8jhXPXSHi2jHtkXYARWDYhQFu0ULTniH/HZQKoFCxJPWTj7T5VbYLa0XBkEQguWIBf"
     "ZPqdAg=="),
]


class SelfTestFailure(Exception):
    pass


class SelfTest:
    def __init__(self):
        self.vectors: dict[str, int] = {}  # known answers matched, per group
        self.rejected: dict[str, int] = {}  # bad inputs rejected (tampered, malformed), per group

    def expect(self, group: str, cond: bool, what: str):
        if not cond:
            raise SelfTestFailure(f"{group}: {what}")
        self.vectors[group] = self.vectors.get(group, 0) + 1

    def reject(self, group: str, what: str, fn, *args, error: str | None = None):
        """fn(*args) must return False or raise VerifyError (containing `error`, if given)."""
        try:
            result = fn(*args)
        except VerifyError as e:
            if error is not None and error not in str(e):
                raise SelfTestFailure(f"{group}: {what}: error {str(e)!r}, want {error!r}") from None
        else:
            if result is not False or error is not None:
                raise SelfTestFailure(f"{group}: {what}: accepted")
        self.rejected[group] = self.rejected.get(group, 0) + 1


def _h(ref) -> bytes:
    return bytes.fromhex(NODES[ref] if isinstance(ref, tuple) else ref)


def _flip(raw: bytes, i: int) -> bytes:
    return raw[:i] + bytes([raw[i] ^ 0x01]) + raw[i + 1:]


def _sign_line(name: str, alg: int, seed: bytes, text: bytes, timestamp: int | None = None) -> str:
    private = Ed25519PrivateKey.from_private_bytes(seed)
    public = private.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    kid = key_id(name, alg, public).to_bytes(4, "big")
    if timestamp is None:
        sig = kid + private.sign(text)
    else:
        sig = kid + timestamp.to_bytes(8, "big") + private.sign(cosignature_message(timestamp, text))
    return f"{EM_DASH} {name} {b64encode(sig)}\n"


def _public(seed: bytes) -> bytes:
    return Ed25519PrivateKey.from_private_bytes(seed).public_key().public_bytes(
        serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def _tampered_notes(note: str):
    """Each text character replaced (the note stays well-formed), then each signature byte flipped."""
    text = parse_note(note.encode()).text
    for i, c in enumerate(text):
        if c != "\n":
            yield f"text[{i}]", note[:i] + ("X" if c != "X" else "Y") + note[i + 1:]
    lines = note[len(text) + 1:].splitlines(keepends=True)
    for j, line in enumerate(lines):
        name, sig64 = line[2:-1].split(" ")
        raw = base64.b64decode(sig64)
        for i in range(len(raw)):
            bad = f"{EM_DASH} {name} {b64encode(_flip(raw, i))}\n"
            yield f"signature {j} byte {i}", text + "\n" + "".join(lines[:j] + [bad] + lines[j + 1:])


def _require_all(note: str, keys: list[Key]) -> dict[Key, int | None]:
    verified = verify_note(parse_note(note.encode()), keys)
    if set(verified) != set(keys):
        raise VerifyError("not every key verified")
    return verified


def selftest_merkle(t: SelfTest):
    g = "rfc6962"
    hashes = [leaf_hash(d) for d in LEAVES]
    for n, root in enumerate(ROOTS):
        t.expect(g, mth(hashes[:n]).hex() == root, f"MTH of {n} leaves")
        if n:
            t.reject(g, f"MTH of {n} leaves, one byte changed", lambda n=n: mth(
                [leaf_hash(LEAVES[0] + b"x")] + hashes[1:n]).hex() == root)
    for (level, index), node in NODES.items():
        span = 1 << level
        t.expect(g, mth(hashes, index * span, (index + 1) * span).hex() == node, f"node {level},{index}")
    t.expect(g, mth(hashes, 4, 7).hex() == MTH_4_7, "MTH(D[4:7])")

    g = "inclusion"
    for (m, n), refs in INCLUSION.items():
        path, root, leaf = [_h(r) for r in refs], bytes.fromhex(ROOTS[n]), hashes[m]
        t.expect(g, inclusion_path(m, hashes[:n]) == path, f"PATH({m}, D[{n}])")
        t.expect(g, verify_inclusion(m, n, leaf, path, root), f"verify ({m}, {n})")
        for i in (0, 31):
            t.reject(g, f"({m},{n}) leaf byte {i}", verify_inclusion, m, n, _flip(leaf, i), path, root)
            t.reject(g, f"({m},{n}) root byte {i}", verify_inclusion, m, n, leaf, path, _flip(root, i))
            for j in range(len(path)):
                bad = path[:j] + [_flip(path[j], i)] + path[j + 1:]
                t.reject(g, f"({m},{n}) path[{j}] byte {i}", verify_inclusion, m, n, leaf, bad, root)
        for other in {m - 1, m + 1} & set(range(n)):
            t.reject(g, f"({m},{n}) as index {other}", verify_inclusion, other, n, leaf, path, root)
        if path:
            t.reject(g, f"({m},{n}) short path", verify_inclusion, m, n, leaf, path[:-1], root)
        t.reject(g, f"({m},{n}) long path", verify_inclusion, m, n, leaf, path + [hashes[0]], root)
        t.reject(g, f"({m},{n}) index = size", verify_inclusion, n, n, leaf, path, root)

    g = "consistency"
    for (m, n), refs in CONSISTENCY.items():
        proof, old, new = [_h(r) for r in refs], bytes.fromhex(ROOTS[m]), bytes.fromhex(ROOTS[n])
        t.expect(g, consistency_proof(m, hashes[:n]) == proof, f"PROOF({m}, D[{n}])")
        t.expect(g, verify_consistency(m, n, old, new, proof), f"verify ({m}, {n})")
        for i in (0, 31):
            t.reject(g, f"({m},{n}) old root byte {i}", verify_consistency, m, n, _flip(old, i), new, proof)
            t.reject(g, f"({m},{n}) new root byte {i}", verify_consistency, m, n, old, _flip(new, i), proof)
            for j in range(len(proof)):
                bad = proof[:j] + [_flip(proof[j], i)] + proof[j + 1:]
                t.reject(g, f"({m},{n}) proof[{j}] byte {i}", verify_consistency, m, n, old, new, bad)
        if proof:
            t.reject(g, f"({m},{n}) short proof", verify_consistency, m, n, old, new, proof[:-1])
        t.reject(g, f"({m},{n}) long proof", verify_consistency, m, n, old, new, proof + [hashes[0]])
    empty, root8 = bytes.fromhex(ROOTS[0]), bytes.fromhex(ROOTS[8])
    t.expect(g, verify_consistency(0, 8, empty, root8, []), "old size 0, empty proof")
    t.reject(g, "old size 0, non-empty proof", verify_consistency, 0, 8, empty, root8, [hashes[0]])
    t.reject(g, "old size 0, wrong old root", verify_consistency, 0, 8, hashes[0], root8, [])
    t.reject(g, "old == new, different roots", verify_consistency, 8, 8, root8, _flip(root8, 0), [])
    t.reject(g, "old > new", verify_consistency, 8, 4, root8, bytes.fromhex(ROOTS[4]), [])
    t.reject(g, "empty proof for 4 -> 8", verify_consistency, 4, 8, bytes.fromhex(ROOTS[4]), root8, [])

    # Not known answers: every PATH and PROOF of trees up to 33 leaves verifies, and a leaf
    # proven at the wrong index does not.
    g = "round-trip"
    many = [leaf_hash(b"leaf %d" % i) for i in range(33)]
    for n in range(1, 34):
        root = mth(many[:n])
        for m in range(n):
            path = inclusion_path(m, many[:n])
            t.expect(g, verify_inclusion(m, n, many[m], path, root), f"inclusion ({m},{n})")
            if n > 1:
                t.reject(g, f"inclusion ({m},{n}) moved", verify_inclusion,
                         (m + 1) % n, n, many[m], path, root)
        for m in range(1, n + 1):
            t.expect(g, verify_consistency(m, n, mth(many[:m]), root, consistency_proof(m, many[:n])),
                     f"consistency ({m},{n})")


def selftest_notes(t: SelfTest):
    g = "signed-note"
    foo = parse_vkey(FOO_VKEY)
    t.expect(g, foo.key_id == 0x530D903A and foo.vkey() == FOO_VKEY, "example.com/foo vkey")
    verified = verify_note(parse_note(FOO_NOTE.encode()), [foo])
    t.expect(g, list(verified) == [foo], "example.com/foo note verifies")
    t.expect(g, parse_note(FOO_NOTE.encode()).text == "This is an example message.\n", "example text")
    for what, bad in _tampered_notes(FOO_NOTE):
        t.reject(g, f"example.com/foo {what}", _require_all, bad, [foo])

    peter, enoch = parse_vkey(PETER_VKEY), parse_vkey(ENOCH_VKEY)
    t.expect(g, (peter.key_id, enoch.key_id) == (0xC74F20A3, 0xAF0CFE78), "Go vkeys")
    seed = base64.b64decode(PETER_SKEY.split("+", 4)[4])[1:]  # Go's PRIVATE+KEY+name+id+base64(1||seed)
    t.expect(g, _public(seed) == peter.public_key, "PeterNeumann skey -> vkey")
    signed = GO_TEXT + "\n" + _sign_line("PeterNeumann", ALG_ED25519, seed, GO_TEXT.encode())
    t.expect(g, signed == GO_TEXT + "\n" + PETER_SIG, "PeterNeumann Sign() output")
    both = GO_TEXT + "\n" + PETER_SIG + ENOCH_SIG
    t.expect(g, list(_require_all(both, [peter, enoch])) == [peter, enoch], "both signatures verify")
    t.expect(g, list(verify_note(parse_note(both.encode()), [peter])) == [peter], "Enoch's ignored")
    t.expect(g, list(verify_note(parse_note(both.encode()), [enoch])) == [enoch], "Peter's ignored")
    t.reject(g, "no known key", lambda: verify_note(parse_note(both.encode()), []),
             error="no verifiable signatures")
    enoch_abcd = ENOCH_SIG.encode()[:60] + b"ABCD" + ENOCH_SIG.encode()[60:]
    dup = (GO_TEXT + "\n" + PETER_SIG + PETER_SIG + ENOCH_SIG + ENOCH_SIG).encode() + enoch_abcd
    t.expect(g, list(verify_note(parse_note(dup), [peter])) == [peter], "repeats, unknown bad one ignored")
    spliced = (GO_TEXT + "\n").encode() + PETER_SIG.encode()[:60] + b"ABCD" + PETER_SIG.encode()[60:]
    t.reject(g, "spliced signature", lambda: verify_note(parse_note(spliced), [peter]),
             error="invalid signature for key PeterNeumann+c74f20a3")
    longer = b64encode(base64.b64decode(PETER_SIG.split(" ")[2]) + b"\0")
    t.reject(g, "signature with a byte more", verify_note, parse_note(
        (GO_TEXT + "\n" + f"{EM_DASH} PeterNeumann {longer}\n").encode()), [peter],
        error="invalid signature for key PeterNeumann+c74f20a3")
    t.reject(g, "same name, other key", lambda: verify_note(
        parse_note(both.encode()), [make_key("PeterNeumann", ALG_ED25519, enoch.public_key)]),
        error="no verifiable signatures")
    t.reject(g, "same id, other name", lambda: verify_note(
        parse_note(both.encode()), [Key("PeterNeuman", peter.key_id, ALG_ED25519, peter.public_key)]),
        error="no verifiable signatures")
    t.reject(g, "ambiguous keys", verify_note, parse_note(both.encode()),
             [peter, Key("PeterNeumann", peter.key_id, ALG_ED25519, enoch.public_key)], error="ambiguous")
    for what, bad in _tampered_notes(both):
        t.reject(g, f"Go note {what}", _require_all, bad, [peter, enoch])
    malformed = [  # Go's badMsgs, and 101 signatures
        GO_TEXT, GO_TEXT + "\n", GO_TEXT + "\n" + PETER_SIG[:-1], "\x01" + GO_TEXT + "\n" + PETER_SIG,
        b"\xff" + (GO_TEXT + "\n" + PETER_SIG).encode(),
        GO_TEXT + "\n" + "\u2014 Bad Name " + PETER_SIG.split(" ")[2].rstrip("\n"),
        GO_TEXT + "\n" + "\u2014 Bad Name " + PETER_SIG.split(" ")[2],
        GO_TEXT + "\n" + PETER_SIG + "Unexpected line.\n", GO_TEXT + "\n" + PETER_SIG * 101,
        GO_TEXT.replace("\n", "\r\n", 1) + "\n" + PETER_SIG, GO_TEXT + "\n" + PETER_SIG.replace(" ", "  ", 1),
        GO_TEXT + "\n" + PETER_SIG.replace("\u2014", "-"), GO_TEXT + "\n" + PETER_SIG.replace("=\n", "\n"),
        GO_TEXT + "\n" + PETER_SIG.replace("Peter", "Peter+"),
        GO_TEXT + "\n" + PETER_SIG.replace("Peter", "Peter\u00a0"),
    ]
    for i, msg in enumerate(malformed):
        data = msg if isinstance(msg, bytes) else msg.encode()
        t.reject(g, f"malformed note {i}", lambda d=data: verify_note(parse_note(d), [peter]),
                 error="malformed note")
    for sig in (b"", b"\xc7\x4f\x20\xa3"):  # empty, and a key id with no signature after it
        short = GO_TEXT + "\n" + f"{EM_DASH} PeterNeumann {b64encode(sig)}\n"
        t.reject(g, f"{len(sig)}-byte signature", parse_note, short.encode(), error="malformed note")
    t.expect(g, len(verify_note(parse_note((GO_TEXT + "\n" + PETER_SIG * 100).encode()), [peter])) == 1,
             "100 signature lines are fine")
    # "The note text MAY contain empty lines": the split is at the last blank line.
    blank = "first\n\n\nafter two empty lines\n"
    with_blank = blank + "\n" + _sign_line("PeterNeumann", ALG_ED25519, seed, blank.encode())
    t.expect(g, parse_note(with_blank.encode()).text == blank, "text with empty lines")
    t.expect(g, list(verify_note(parse_note(with_blank.encode()), [peter])) == [peter], "it verifies")

    g = "vkey"
    for vkey, kid in GO_BAD_VKEYS.items():
        name, _, key64 = vkey.split("+", 2)
        t.expect(g, key_id(name, *(lambda r: (r[0], r[1:]))(base64.b64decode(key64))) == kid,
                 f"key id of {vkey[:30]}")
        t.reject(g, vkey, parse_vkey, vkey)
    raw = PETER_VKEY.encode()
    for i in range(len(raw) + 1):  # Go's manglings: every proper substring, every byte + 1
        for j in range(i + 1, len(raw) + 1):
            if (i, j) != (0, len(raw)):
                t.reject(g, f"substring {i}:{j}", parse_vkey, raw[i:j].decode())
    for i in range(len(raw)):
        t.reject(g, f"byte {i} + 1", parse_vkey, (raw[:i] + bytes([raw[i] + 1]) + raw[i + 1:]).decode())
    t.reject(g, "upper-case id", parse_vkey, PETER_VKEY.replace("c74f20a3", "C74F20A3"))
    t.reject(g, "wrong type wanted", parse_vkey, PETER_VKEY, ALG_COSIGNATURE_V1)


def selftest_checkpoints(t: SelfTest):
    g = "checkpoint"
    log, witness = parse_vkey(LOG_VKEY, ALG_ED25519), parse_vkey(WITNESS_VKEY, ALG_COSIGNATURE_V1)
    t.expect(g, _public(LOG_SEED).hex() == LOG_PUBLIC == log.public_key.hex(), "log key from seed")
    t.expect(g, make_key(log.name, ALG_ED25519, _public(LOG_SEED)).vkey() == LOG_VKEY, "log vkey")
    t.expect(g, _public(WITNESS_SEED).hex() == WITNESS_PUBLIC == witness.public_key.hex(), "witness key")
    t.expect(g, make_key(witness.name, ALG_COSIGNATURE_V1, _public(WITNESS_SEED)).vkey() == WITNESS_VKEY,
             "witness vkey")
    t.expect(g, _sign_line(log.name, ALG_ED25519, LOG_SEED, CP_TEXT.encode()) == CP_SIG, "log signature")
    t.expect(g, _sign_line(witness.name, ALG_COSIGNATURE_V1, WITNESS_SEED, CP_TEXT.encode(), WITNESS_TIME)
             == WITNESS_SIG, "cosignature")
    note = CP_TEXT + "\n" + CP_SIG + WITNESS_SIG
    cp, cosigned = open_checkpoint(note.encode(), log, [witness])
    hashes = [leaf_hash(d) for d in LEAVES]
    t.expect(g, (cp.origin, cp.size, cp.root, cp.extensions) == ("example.com/audit-log", 8, mth(hashes), ()),
             "checkpoint body")
    t.expect(g, cosigned == ["witness.example/w1"], "cosigned by w1")
    t.expect(g, verify_note(parse_note(note.encode()), [witness]) == {witness: WITNESS_TIME}, "its time")
    for what, bad in _tampered_notes(note):
        t.reject(g, what, open_checkpoint, bad.encode(), log, [witness])
    raw = base64.b64decode(WITNESS_SIG.split(" ")[2])
    for ts in (WITNESS_TIME - 1, WITNESS_TIME + 1):
        moved = raw[:4] + ts.to_bytes(8, "big") + raw[12:]
        bad = CP_TEXT + "\n" + CP_SIG + f"{EM_DASH} witness.example/w1 {b64encode(moved)}\n"
        t.reject(g, f"cosignature time {ts}", open_checkpoint, bad.encode(), log, [witness],
                 error="invalid signature for key witness.example/w1")
    late = _sign_line(witness.name, ALG_COSIGNATURE_V1, WITNESS_SEED, CP_TEXT.encode(), 2**63)
    t.reject(g, "cosignature time 2^63 (signed)", open_checkpoint, (CP_TEXT + "\n" + CP_SIG + late).encode(),
             log, [witness], error="invalid signature for key witness.example/w1")
    t.reject(g, "witness key as the log key", open_checkpoint, note.encode(),
             make_key(log.name, ALG_COSIGNATURE_V1, log.public_key), [])
    t.reject(g, "witness missing", open_checkpoint, (CP_TEXT + "\n" + CP_SIG).encode(), log, [witness],
             error="no cosignature from witness witness.example/w1+f1ed8c47")
    t.reject(g, "log signature missing", open_checkpoint, (CP_TEXT + "\n" + WITNESS_SIG).encode(), log,
             [witness], error="no signature from the log key")
    other_root = CP_TEXT.replace("\n8\n", "\n7\n")
    t.reject(g, "cosignature moved to another checkpoint", verify_note,
             parse_note((other_root + "\n" + WITNESS_SIG).encode()), [witness], error="invalid signature")

    root = "XcnaeacGWamtVZy3Ad7ZoqudgjqtL0lgz+Nw7/RgQyg="
    good = {f"o\n8\n{root}\n": 0, f"o\n8\n{root}\next one\next two\n": 2,
            "o\n0\n47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=\n": 0}
    for text, n_ext in good.items():
        t.expect(g, len(parse_checkpoint(text).extensions) == n_ext, f"body {text!r}")
    bad_bodies = [
        f"o\n08\n{root}\n", f"o\n+8\n{root}\n", f"o\n 8\n{root}\n", f"o\n8 \n{root}\n", f"o\n\n{root}\n",
        f"o\n-1\n{root}\n", f"o\n{2**64}\n{root}\n", f"o\n\u0668\n{root}\n", f"\n8\n{root}\n", "o\n8\n",
        f"o\n8\n{root}", f"o\n8\n{root}\n\n", f"o\n8\n{root}\next\n\nmore\n", f"o\n8\n{root[:-2]}=\n",
        f"o\n8\n{root[:-2]}h=\n", f"o\n8\n{root.replace('+', '-')}\n", f"o\n8\n{root[:-1]}\n",
        f"o\n8\n{b64encode(bytes(33))}\n", f"o\n0\n{root}\n",
    ]
    for text in bad_bodies:
        t.reject(g, f"body {text!r}", parse_checkpoint, text, error="checkpoint")

    g = "sigsum"
    t.expect(g, sha256(bytes.fromhex(SIGSUM_LOG_PUBLIC)).hex() in SIGSUM_BODY, "origin names the log key")
    message = cosignature_message(SIGSUM_TIME, SIGSUM_BODY.encode())
    keys, lines = [], []
    for name, public, sig, line64 in SIGSUM_WITNESSES:
        public, sig = bytes.fromhex(public), bytes.fromhex(sig)
        key = make_key(name, ALG_COSIGNATURE_V1, public)

        def raw_ok(msg: bytes, s: bytes, public=public) -> bool:
            try:
                Ed25519PublicKey.from_public_bytes(public).verify(s, msg)
                return True
            except InvalidSignature:
                return False

        t.expect(g, raw_ok(message, sig), f"{name} raw Ed25519")
        line = base64.b64decode(line64)
        want = key.key_id.to_bytes(4, "big") + SIGSUM_TIME.to_bytes(8, "big") + sig
        t.expect(g, line == want, f"{name} line")
        for ts in (SIGSUM_TIME - 1, SIGSUM_TIME + 1):
            t.reject(g, f"{name} time {ts}", raw_ok, cosignature_message(ts, SIGSUM_BODY.encode()), sig)
        for i in range(0, len(message), 7):
            t.reject(g, f"{name} message byte {i}", raw_ok, _flip(message, i), sig)
        for i in range(0, 64, 5):
            t.reject(g, f"{name} signature byte {i}", raw_ok, message, _flip(sig, i))
        keys.append(key)
        lines.append(f"{EM_DASH} {name} {line64}\n")
    note = SIGSUM_BODY + "\n" + "".join(lines)
    t.expect(g, _require_all(note, keys) == {k: SIGSUM_TIME for k in keys}, "as a C2SP note")
    for what, bad in _tampered_notes(note):
        t.reject(g, what, _require_all, bad, keys)


def cmd_selftest(args) -> dict:
    t = SelfTest()
    try:
        selftest_merkle(t)
        selftest_notes(t)
        selftest_checkpoints(t)
    except (SelfTestFailure, VerifyError) as e:
        raise VerifyError(f"selftest: {e}") from None
    return {  # (round-trip checks are self-consistency, not known answers: counted apart)
        "known_answers": sum(n for g, n in t.vectors.items() if g != "round-trip"),
        "rejected": sum(t.rejected.values()),
        "round_trip": t.vectors.get("round-trip", 0),
        "groups": {g: {"vectors": t.vectors.get(g, 0), "rejected": t.rejected.get(g, 0)}
                   for g in dict.fromkeys([*t.vectors, *t.rejected])},
    }


# ---- command line ---------------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # usage errors are reported like every other failure
        print(json.dumps({"ok": False, "error": f"usage: {message}"}))
        sys.exit(1)


def main() -> int:
    parser = _Parser(description="Verifies file-agent's signed audit checkpoints and RFC 6962 proofs.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    sub.add_parser("selftest", help="run the known-answer vectors").set_defaults(run=cmd_selftest)
    for name, run, witnesses, line_file in (
        ("checkpoint", cmd_checkpoint, True, False),
        ("inclusion", cmd_inclusion, True, True),
        ("consistency", cmd_consistency, False, False),
    ):
        p = sub.add_parser(name, help=f"verify a {name} (input on stdin)")
        p.add_argument("--key", required=True, help="the log's vkey (signature type 0x01)")
        if witnesses:
            p.add_argument("--witness-key", action="append", default=[],
                           help="a witness vkey (type 0x04) that must have cosigned; repeatable")
        if line_file:
            p.add_argument("--line-file", help="file holding the audit line's exact bytes, no newline")
        p.set_defaults(run=run)
    p = sub.add_parser("receipt", help="verify a saved receipt (input on stdin)")
    p.add_argument("--key", required=True, help="the log's vkey (signature type 0x01)")
    p.add_argument("--witness-key", action="append", default=[],
                   help="a witness vkey (type 0x04) that must have cosigned; repeatable")
    p.add_argument("--line-file", help="file holding the audit line's exact bytes, no newline")
    p.add_argument("--origin", help="the origin prefix, when it is not the key's name")
    p.set_defaults(run=cmd_receipt)
    sub.add_parser("root", help="RFC 6962 root of the audit lines on stdin").set_defaults(run=cmd_root)
    args = parser.parse_args()
    try:
        result = {"ok": True, **args.run(args)}
    except VerifyError as e:
        result = {"ok": False, "error": str(e)}
    except OSError as e:
        result = {"ok": False, "error": f"{e.strerror or e}: {e.filename}"}
    print(json.dumps(result))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
