#!/usr/bin/python3
"""Writes the inputs llm.c's train_gpt2.c reads, in its formats, for bench-core (run with Debian's
/usr/bin/python3, which has numpy):

  DIR/gpt2_124M.bin  the checkpoint: 256 int32 (magic 20240326, version 3, maxT, V, L, NH, C, Vp,
                     zeros), then the fp32 parameters in train_gpt2.c's fixed order (wte Vp*C, wpe
                     maxT*C, ln1w, ln1b, qkvw, qkvb, attprojw, attprojb, ln2w, ln2b, fcw, fcb,
                     fcprojw, fcprojb: each L stacked; lnfw, lnfb)
  DIR/dev/data/tinyshakespeare/tiny_shakespeare_{train,val}.bin
                     tokens: 256 int32 (magic 20240520, version 1, count, zeros), then uint16

The weights are random: matrices and embeddings N(0, 0.02) (the padded vocabulary rows zero, as
llm.c's export leaves them), LayerNorm weights 1, biases 0; the tokens uniform in [0, V). Their
values do not change the step's cost; the shapes do. Prints the parameter count.

Usage: llmc_inputs.py DIR L NH C V VP MAXT TOKENS SEED
"""

import os
import sys


def header(np, *values):
    h = np.zeros(256, dtype=np.int32)
    h[:len(values)] = values
    return h


def main(argv):
    import numpy as np  # inside: occtools' modules import with the standard library alone

    out = argv[0]
    L, NH, C, V, Vp, maxT, ntok, seed = (int(x) for x in argv[1:])
    rng = np.random.default_rng(seed)
    count = 0

    def normal(f, rows, cols, zero_from=None):
        nonlocal count
        w = rng.standard_normal((rows, cols), dtype=np.float32)
        w *= np.float32(0.02)
        if zero_from is not None:
            w[zero_from:] = 0
        w.tofile(f)
        count += w.size

    def const(f, n, value):
        nonlocal count
        np.full(n, value, dtype=np.float32).tofile(f)
        count += n

    with open(os.path.join(out, "gpt2_124M.bin"), "wb") as f:
        header(np, 20240326, 3, maxT, V, L, NH, C, Vp).tofile(f)
        normal(f, Vp, C, zero_from=V)  # wte
        normal(f, maxT, C)  # wpe
        const(f, L * C, 1.0)  # ln1w
        const(f, L * C, 0.0)  # ln1b
        for _ in range(L):
            normal(f, 3 * C, C)  # qkvw
        const(f, L * 3 * C, 0.0)  # qkvb
        for _ in range(L):
            normal(f, C, C)  # attprojw
        const(f, L * C, 0.0)  # attprojb
        const(f, L * C, 1.0)  # ln2w
        const(f, L * C, 0.0)  # ln2b
        for _ in range(L):
            normal(f, 4 * C, C)  # fcw
        const(f, L * 4 * C, 0.0)  # fcb
        for _ in range(L):
            normal(f, C, 4 * C)  # fcprojw
        const(f, L * C, 0.0)  # fcprojb
        const(f, C, 1.0)  # lnfw
        const(f, C, 0.0)  # lnfb
    data = os.path.join(out, "dev", "data", "tinyshakespeare")
    os.makedirs(data, exist_ok=True)
    for split in ("train", "val"):
        with open(os.path.join(data, f"tiny_shakespeare_{split}.bin"), "wb") as f:
            header(np, 20240520, 1, ntok).tofile(f)
            rng.integers(0, V, ntok, dtype=np.uint16).tofile(f)
    print(count)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
