"""python3 -m occtools extract-kjv / extract-gcide: the training corpora, rebuilt from Debian packages.

extract-kjv [OUTPUT]: data/kjv.txt.zst (the bundled corpus) from the bible-kjv package: one verse
per line, a blank line between chapters, no headings or verse numbers; byte-identical to the
committed file (default OUTPUT: a temporary file; pass data/kjv.txt.zst to overwrite it).

extract-gcide OUTPUT.jsonl.zst: a second, larger corpus from dict-gcide (the GNU Collaborative
International Dictionary of English, GPL-3+; about 40 MB of text): one JSONL document
{"text": ...} per dictionary entry, for `optimus-cc preprocess --input` (--json-keys text). The
bundled KJV (about 1 M tokens) is too small for runs of tens of millions of tokens without
repeating it many times. Each entry keeps its headword line and definitions, with the lines of a
paragraph joined and the pronunciation markup (\\Ab*do"men\\), the cross-reference braces
({Acerb}) and the source tags ([1913 Webster], [PJC], ...) removed; the database's own header
entries (00-database-*) are dropped. The output is a pure function of the package's files.
GCIDE_DICT=FILE reads another file of the dictionary's format (the tests' small one).
"""

import argparse
import gzip
import json
import os
import re
import shutil
import subprocess
import tempfile

from occtools.common.errors import Failure

SOURCE_TAG = re.compile(r"\[(?:[0-9]{4} Webster|Webster [0-9]{4}[^\]]*|PJC|WordNet[^\]]*|Century Dict[^\]]*|RJC|JC"
                        r"|[A-Z]{2,4})\]")
PRONUNCIATION = re.compile(r"\\[^\\\n]*\\,?")


def add_parser(sub):
    for name, what in (("extract-kjv", "data/kjv.txt.zst from Debian's bible-kjv"),
                       ("extract-gcide", "a JSONL corpus from Debian's dict-gcide (the GPU bundle's long-run corpus)")):
        p = sub.add_parser(name, help=what, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
        p.add_argument("output", nargs="?" if name == "extract-kjv" else None)
        p.set_defaults(func=kjv_main if name == "extract-kjv" else gcide_main)


def need(tool, package):
    if not shutil.which(tool):
        raise Failure(f"'{tool}' not found; apt-get install {package}", 1)


def compress(text, out, threads=()):
    """TEXT zstd -19 into OUT (written whole, then moved into place); THREADS: zstd's -T flag, if any."""
    need("zstd", "zstd")
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        plain = os.path.join(tmp, "corpus")
        with open(plain, "w", encoding="utf-8", newline="") as f:
            f.write(text)
        # From a file (not a pipe): the frame records the content size, as the committed files' do.
        r = subprocess.run(["zstd", "-q", "-19", *threads, "-f", plain, "-o", plain + ".zst"], capture_output=True)
        if r.returncode != 0:
            raise Failure(f"zstd failed: {r.stderr.decode(errors='replace').strip()}", 1)
        shutil.move(plain + ".zst", out)


def kjv_text(raw):
    """Verse lines (leading spaces, a number, a space) kept; a heading line ("Genesis 1") becomes
    the blank separator before every chapter but the first; blank lines dropped."""
    out, started = [], False
    for n, line in enumerate(raw.splitlines(), 1):
        m = re.match(r"^ +[0-9]+ ", line)
        if m:
            out.append(line[m.end():])
            started = True
        elif line == "":
            continue
        elif re.search(r"[0-9]+$", line):
            if started:
                out.append("")
        else:
            raise Failure(f"unexpected line {n} of bible's output: {line}", 1)
    return "\n".join(out) + "\n"


def kjv_main(a):
    need("bible", "bible-kjv")
    raw = subprocess.run(["bible", "-l100000", "Gen1:1-Rev22:21"], capture_output=True, text=True, check=True).stdout
    text = kjv_text(raw)
    lines = text.splitlines()
    verses, chapters = sum(1 for x in lines if x), sum(1 for x in lines if not x) + 1
    if verses != 31102 or chapters != 1189:
        raise Failure(f"extracted {verses} verses in {chapters} chapters, expected 31102 in 1189; check the bible-kjv "
                      "version", 1)
    out = a.output or tempfile.mkstemp(suffix=".txt.zst")[1]
    compress(text, out)
    print(f"wrote {out}: {verses} verses, {chapters} chapters, {len(text.encode())} bytes uncompressed")
    return 0


def gcide_entry(lines):
    """One dictionary entry's JSONL document text, or None (a header entry, or nothing left)."""
    if lines[0].startswith("00-database") or lines[0].startswith("00database"):
        return None
    paragraphs, cur = [], []
    for line in lines:
        if line.strip():
            cur.append(line.strip())
        elif cur:
            paragraphs.append(" ".join(cur))
            cur = []
    if cur:
        paragraphs.append(" ".join(cur))
    text = "\n".join(re.sub(r"\s{2,}", " ", SOURCE_TAG.sub("", PRONUNCIATION.sub("", p))).replace("{", "")
                     .replace("}", "").strip() for p in paragraphs)
    return "\n".join(p for p in text.split("\n") if p) or None


def gcide_documents(raw_lines):
    """(JSONL lines, header entries dropped) of the dictionary's lines. An entry starts with its
    headword at column 0, after a blank line; definitions are indented."""
    docs, skipped, entry = [], 0, []

    def emit():
        nonlocal skipped
        if not entry:
            return
        text = gcide_entry(entry)
        if text is None and entry[0].startswith(("00-database", "00database")):
            skipped += 1
        elif text:
            docs.append(json.dumps({"text": text}, ensure_ascii=False))
    for line in raw_lines:
        if line and not line[0].isspace() and (not entry or not entry[-1].strip()):
            emit()
            entry = []
        entry.append(line)
    emit()
    return docs, skipped


def gcide(out, source=None):
    """OUT.jsonl.zst from the dictionary (default /usr/share/dictd/gcide.dict.dz, or $GCIDE_DICT)."""
    source = source or os.environ.get("GCIDE_DICT", "/usr/share/dictd/gcide.dict.dz")
    if not os.access(source, os.R_OK):
        raise Failure(f"{source} not found; apt-get install dict-gcide", 1)
    need("zstd", "zstd")
    with gzip.open(source, "rb") as f:
        raw = [b.decode("utf-8", errors="replace").rstrip("\n") for b in f]
    docs, skipped = gcide_documents(raw)
    text = "".join(d + "\n" for d in docs)
    compress(text, out, ["-T0"])
    print(f"wrote {out}: {len(docs)} documents ({skipped} database header entries dropped), {len(text.encode())} "
          f"bytes of JSONL, {os.path.getsize(out)} compressed")


def gcide_main(a):
    gcide(a.output)
    return 0
