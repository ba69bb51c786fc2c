"""Append-only JSON ledgers: lists of records with an id, merged by id (a record already there
must be identical: records never change once written), written atomically, one record per line
so that appending a record adds one line to a committed file's diff."""

import json
import os
import tempfile


class Conflict(Exception):
    """A record of the same id differs between two ledgers."""


def save(doc, path, lists):
    """Atomic: a stopped job leaves the old file or the new one, never half of one."""
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", dir=folder)
    with os.fdopen(fd, "w") as f:
        f.write(dumps(doc, lists))
    os.replace(tmp, path)


def dumps(doc, lists):
    """The head's keys one per line, then each list's records one per line."""
    head = {k: v for k, v in doc.items() if k not in lists}
    parts = [f" {json.dumps(k)}: {json.dumps(v)}" for k, v in head.items()]
    for key in lists:
        body = ",\n".join("  " + json.dumps(x, separators=(", ", ": ")) for x in doc[key])
        parts.append(f" {json.dumps(key)}: [" + (f"\n{body}\n ]" if body else "]"))
    return "{\n" + ",\n".join(parts) + "\n}\n"


def merge(src, dst, lists):
    """Appends to DST the records of SRC's LISTS it lacks (by id); a second merge adds nothing.
    Returns the number added per list; Conflict when a record of the same id differs."""
    added = []
    for key in lists:
        have = {x["id"]: x for x in dst[key]}
        n = 0
        for x in src[key]:
            if x["id"] in have:
                if have[x["id"]] != x:
                    raise Conflict(f"{key[:-1]} {x['id']} differs between the two ledgers; records never change "
                                   f"once written: keep the committed one")
                continue
            dst[key].append(x)
            have[x["id"]] = x
            n += 1
        added.append(n)
    return tuple(added)
