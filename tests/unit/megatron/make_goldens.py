#!/usr/bin/env python3
"""Golden data indices made by Megatron-LM's own code, for tests/unit/test_megatron_goldens.cpp.

Runs megatron-core's BlendedMegatronDatasetBuilder, GPTDataset, BlendedDataset and
helpers.cpp (NVIDIA/Megatron-LM at commit MEGATRON_COMMIT) under NumPy on small corpora
written by Megatron's own IndexedDatasetBuilder, and saves, beside this script:
  corpus_{a,b,c}.bin/.idx   the corpora (a, b uint16; c int32, ids above 65535);
  <scenario>-<set>[-<part>]-<array>.npy   each set's document / sample / shuffle index
                            (and a blend's dataset / dataset-sample index);
  blending_index.npy        build_blending_indices for several weight vectors;
  split_ranges.npy          the sequences [begin, end) of each split for N = 1..1000;
  manifest.json             the scenarios' flags, each part's sequences and sample
                            count, each set's first samples' tokens, and the inputs of
                            the two tables above.

Usage (Debian: python3-numpy, python3-torch, g++, python3-pybind11 for the helper):
  git -C Megatron-LM archive MEGATRON_COMMIT megatron/core | tar -x -C /tmp/mlm
  /usr/bin/python3 tests/unit/megatron/make_goldens.py --megatron /tmp/mlm
Only the imports that Megatron's dataset code makes for logging, loading and type
names (megatron.core.utils, safe_globals, tokenizers, msc_utils) are stubbed; every
index comes from Megatron's functions.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import types

import numpy

MEGATRON_COMMIT = "d98e8a64dd"
HERE = os.path.dirname(os.path.abspath(__file__))
VOCAB = 70000  # corpus c holds ids above 65535: the datasets blend int32 with uint16


def load_megatron(root):
    datasets = os.path.join(root, "megatron", "core", "datasets")
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    helper = os.path.join(datasets, "helpers_cpp" + suffix)
    if not os.path.exists(helper):  # as megatron/core/datasets/Makefile builds it
        includes = subprocess.check_output([sys.executable, "-m", "pybind11", "--includes"], text=True).split()
        subprocess.check_call(["g++", "-O3", "-Wall", "-shared", "-std=c++17", "-fPIC", *includes,
                               os.path.join(datasets, "helpers.cpp"), "-o", helper])

    def module(name, path=None, **attrs):
        m = types.ModuleType(name)
        if path:
            m.__path__ = [path]
        m.__dict__.update(attrs)
        sys.modules[name] = m

    def log_single_rank(logger, *args, rank=0, **kwargs):
        logger.log(*args, **kwargs)

    class Msc:
        @staticmethod
        def is_enabled():
            return False

    module("megatron", os.path.join(root, "megatron"))
    module("megatron.core", os.path.join(root, "megatron", "core"))
    module("megatron.core.utils", log_single_rank=log_single_rank)
    module("megatron.core.safe_globals", safe_numpy_load=numpy.load)
    module("megatron.core.tokenizers", MegatronTokenizerBase=object)
    module("megatron.core.msc_utils", MultiStorageClientFeature=Msc, maybe_msc=types.SimpleNamespace(open=open))
    import megatron.core.datasets.blended_megatron_dataset_builder as builder
    import megatron.core.datasets.blended_megatron_dataset_config as config
    import megatron.core.datasets.gpt_dataset as gpt
    import megatron.core.datasets.helpers as helpers
    import megatron.core.datasets.indexed_dataset as indexed
    return types.SimpleNamespace(builder=builder, config=config, gpt=gpt, helpers=helpers, indexed=indexed)


class Tokenizer:  # what GPTDatasetConfig and MegatronDataset read of a tokenizer
    vocab_size = VOCAB
    eod = 0
    pad = -1
    special_tokens_dict = {}
    unique_identifiers = {"class": "Tokenizer", "vocab_size": VOCAB}


def write_corpora(m):
    """Three corpora with every shape of document Megatron's files can hold: short
    and long ones, empty ones (no sequence: preprocess_data.py's empty text),
    zero-length sequences, and several sequences in one document (--split-sentences)."""
    # Over 500 sequences each, so that --split 949,50,1 leaves every test split one
    # (a split of no sequences never ends Megatron's epoch loop).
    specs = {"a": (numpy.uint16, 620, 7), "b": (numpy.uint16, 540, 3), "c": (numpy.int32, 560, 5)}
    for name, (dtype, docs, salt) in specs.items():
        prefix = os.path.join(HERE, "corpus_" + name)
        b = m.indexed.IndexedDatasetBuilder(prefix + ".bin", dtype=dtype)
        for d in range(docs):
            length = (d * 37 + salt) % 23 + (5 if d >= docs - 3 else 0)
            if d >= docs - 3:
                lengths = [length]
            elif d % 29 == 5:
                lengths = []  # an empty document
            elif d % 31 == 7:
                lengths = [0]  # a zero-length sequence
            elif d % 13 == 2:
                lengths = [length // 3, length - length // 3]  # two sequences in one document
            else:
                lengths = [length]
            total = sum(lengths)
            base = 66000 if dtype == numpy.int32 else 0
            tokens = [(base + d * 131 + j * 7 + salt) % (VOCAB if dtype == numpy.int32 else 1000) for j in range(total)]
            b.add_document(numpy.array(tokens, dtype=numpy.int64), lengths)
        b.finalize(prefix + ".idx")


# name, flags, sizes [train, valid, test]: the sample counts Megatron's
# get_train_valid_test_num_samples gives for the flags in the comment.
SCENARIOS = [
    # --train-iters 40 --global-batch-size 16 --eval-interval 20 --eval-iters 2
    ("single", dict(seq_length=16, seed=1234, data_path=["corpus_a"], split="949,50,1"), [640, 96, 32]),
    # a train split of 377 samples an epoch asked for 1.3 epochs' samples: a separate final epoch
    ("epochs_separate", dict(seq_length=16, seed=7, data_path=["corpus_a"], split="949,50,1"), [490, 8, 8]),
    # 1.9 epochs: the final epoch shuffled with the others
    ("epochs_joint", dict(seq_length=16, seed=7, data_path=["corpus_a"], split="949,50,1"), [716, 8, 8]),
    # validation and test splits shorter than one sample of 128 + 1 tokens
    ("under_one_sample", dict(seq_length=128, seed=1234, data_path=["corpus_a"], split="98,1,1"), [64, 32, 16]),
    ("split_90_5_5", dict(seq_length=8, seed=1234, data_path=["corpus_a"], split="90,5,5"), [800, 64, 32]),
    ("blend_70_20_10", dict(seq_length=16, seed=1234, data_path=["0.7", "corpus_a", "0.2", "corpus_b", "0.1", "corpus_c"],
                            split="949,50,1"), [1600, 96, 32]),
    ("blend_50_30_20", dict(seq_length=8, seed=99, data_path=["0.5", "corpus_a", "0.3", "corpus_b", "0.2", "corpus_c"],
                            split="90,5,5"), [1000, 120, 40]),
    ("one_weighted", dict(seq_length=16, seed=1234, data_path=["1.0", "corpus_b"], split="949,50,1"), [160, 16, 16]),
    ("per_set", dict(seq_length=16, seed=5, train_data_path=["0.6", "corpus_a", "0.4", "corpus_c"],
                     valid_data_path=["corpus_b"], test_data_path=["0.5", "corpus_b", "0.5", "corpus_c"]), [480, 64, 32]),
    # prefixes without weights: each dataset's one epoch (num_samples None), blended by their sizes
    ("unweighted", dict(seq_length=16, seed=1234, data_path=["corpus_a", "corpus_b"], split="90,5,5"), [400, 16, 8]),
    ("unweighted_odd", dict(seq_length=8, seed=3, data_path=["corpus_a", "corpus_b", "corpus_c"], split="90,5,5"),
     [1500, 64, 32]),
    ("unweighted_per_set", dict(seq_length=16, seed=5, train_data_path=["corpus_a", "corpus_c"],
                                valid_data_path=["corpus_b"], test_data_path=["corpus_b", "corpus_c"]), [480, 64, 32]),
]
SET_NAMES = ["train", "valid", "test"]


def run_scenario(m, name, flags, sizes, cache):
    from megatron.core.datasets.utils import get_blend_from_list
    kwargs = dict(random_seed=flags["seed"], sequence_length=flags["seq_length"], path_to_cache=cache,
                  tokenizer=Tokenizer(), reset_position_ids=False, reset_attention_mask=False, eod_mask_loss=False)

    def resolve(words):
        prefixes, weights = get_blend_from_list(words)
        return [os.path.join(HERE, p) for p in prefixes], weights

    if "data_path" in flags:
        kwargs.update(blend=resolve(flags["data_path"]), split=flags["split"])
    else:
        kwargs["blend_per_split"] = [resolve(flags[k]) if k in flags else None
                                     for k in ("train_data_path", "valid_data_path", "test_data_path")]
    cfg = m.gpt.GPTDatasetConfig(**kwargs)
    built = m.builder.BlendedMegatronDatasetBuilder(m.gpt.GPTDataset, sizes, lambda: True, cfg).build()
    record = {"flags": flags, "sizes": sizes, "sets": {}}
    for set_name, ds in zip(SET_NAMES, built):
        if ds is None:
            record["sets"][set_name] = None
            continue
        entry = {"size": len(ds), "parts": []}
        parts = ds.datasets if hasattr(ds, "datasets") else [ds]
        if hasattr(ds, "datasets"):
            entry["weights"] = [float.hex(w) for w in ds.weights]
            numpy.save(os.path.join(HERE, f"{name}-{set_name}-dataset_index.npy"), ds.dataset_index)
            numpy.save(os.path.join(HERE, f"{name}-{set_name}-dataset_sample_index.npy"), ds.dataset_sample_index)
        for k, part in enumerate(parts):
            stem = f"{name}-{set_name}-{k}"
            numpy.save(os.path.join(HERE, stem + "-document_index.npy"), part.document_index)
            numpy.save(os.path.join(HERE, stem + "-sample_index.npy"), part.sample_index)
            numpy.save(os.path.join(HERE, stem + "-shuffle_index.npy"), part.shuffle_index)
            entry["parts"].append({"prefix": os.path.basename(part.dataset_path),
                                   "sequences": [int(part.indices[0]), int(part.indices[-1]) + 1],
                                   "num_samples": part.num_samples, "samples": len(part)})
        first = []
        for i in range(min(6, len(ds))):
            item = ds[i]
            first.append([int(t) for t in item["tokens"]] + [int(item["labels"][-1])])
        entry["first_samples"] = first
        record["sets"][set_name] = entry
    return record


BLEND_WEIGHTS = [[0.7, 0.2, 0.1], [0.5, 0.3, 0.2], [0.7, 0.3], [0.6, 0.4], [0.5, 0.5], [1 / 3, 1 / 3, 1 / 3],
                 [0.05, 0.15, 0.1, 0.2, 0.02, 0.08, 0.1, 0.1, 0.13, 0.07]]
BLEND_SIZE = 5000
SPLITS = ["949,50,1", "90,5,5", "98,2,0", "0.9/0.1", "1,1,1", "100"]
SPLIT_N = 700


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--megatron", required=True, help=f"a Megatron-LM tree at {MEGATRON_COMMIT} (megatron/core)")
    args = ap.parse_args()
    m = load_megatron(os.path.abspath(args.megatron))
    for f in os.listdir(HERE):
        if f.endswith(".npy") or f.startswith("corpus_") or f == "manifest.json":
            os.remove(os.path.join(HERE, f))
    write_corpora(m)
    manifest = {"megatron_commit": MEGATRON_COMMIT, "numpy": numpy.__version__, "vocab_size": VOCAB, "scenarios": {}}
    cache = tempfile.mkdtemp(prefix="megatron-goldens-")
    try:
        for name, flags, sizes in SCENARIOS:
            manifest["scenarios"][name] = run_scenario(m, name, flags, sizes, os.path.join(cache, name))
    finally:
        shutil.rmtree(cache)

    # helpers.build_blending_indices as BlendedDataset calls it (weights normalised by Megatron's normalize).
    from megatron.core.datasets.utils import normalize
    table = numpy.zeros((len(BLEND_WEIGHTS), BLEND_SIZE), dtype=numpy.int16)
    for row, weights in enumerate(BLEND_WEIGHTS):
        index = numpy.zeros(BLEND_SIZE, dtype=numpy.int16)
        sample = numpy.zeros(BLEND_SIZE, dtype=numpy.int64)
        m.helpers.build_blending_indices(index, sample, normalize(weights), len(weights), BLEND_SIZE, False)
        table[row] = index
    numpy.save(os.path.join(HERE, "blending_index.npy"), table)
    manifest["blending_index"] = {"weights": [[float.hex(w) for w in ws] for ws in BLEND_WEIGHTS], "size": BLEND_SIZE}

    # The builder's bookends (_build_megatron_dataset_splits): int(round(split[i][k] * float(N))).
    ranges = numpy.full((len(SPLITS), SPLIT_N, 3, 2), -1, dtype=numpy.int16)
    for s, split in enumerate(SPLITS):
        matrix = m.config.convert_split_vector_to_split_matrix(m.config.parse_and_normalize_split(split))
        for n in range(1, SPLIT_N + 1):
            for i in range(3):
                if matrix[i] is not None:
                    ranges[s, n - 1, i] = [int(round(matrix[i][0] * float(n))), int(round(matrix[i][1] * float(n)))]
    numpy.save(os.path.join(HERE, "split_ranges.npy"), ranges)
    manifest["split_ranges"] = {"splits": SPLITS, "max_sequences": SPLIT_N}

    with open(os.path.join(HERE, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
        f.write("\n")
    print(f"goldens written to {HERE} from Megatron-LM {MEGATRON_COMMIT} (numpy {numpy.__version__})")


if __name__ == "__main__":
    main()
