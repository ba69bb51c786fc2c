"""Every command of `python3 -m occtools`, by group (the order --help lists them in). Each module
defines add_parser(subparsers), which sets the function that runs the command."""

from occtools.gpu_bundle import cli as gpu_bundle
from occtools.gpu_check import cli as gpu_check
from occtools.gpu_check import hf_tokenizer
from occtools.gpu_check import verdict_cli as gpu_verdict
from occtools import chaos, check_layers, extract, first_run, lep_shapes, llama
from occtools.bench import async_save as bench_async_save
from occtools.bench import core as bench_core
from occtools.bench import data_scale
from occtools.diloco import quality as diloco_quality
from occtools.diloco import speedup as diloco_speedup
from occtools.bench import layouts as bench_layouts
from occtools.planner import projection as plan_projection
from occtools.planner import scale_features as plan_scale_features
from occtools.planner import validate as validate_planner
from occtools.planner import match_regimes
from occtools.quality import cli as quality
from occtools.compressors import cli as compressors
from occtools.compressors import entropy as entropy_report
from occtools.compressors import lowbit
from occtools.speedup import cli as speedup
from occtools.regime import cli as regime
from occtools.race import cli as race

GROUPS = (
    ("experiments", (quality, compressors, lowbit, entropy_report, lep_shapes, llama, diloco_quality, regime)),
    ("benchmarks", (speedup, diloco_speedup, bench_core, bench_layouts, data_scale, first_run, chaos,
                    bench_async_save, race)),
    ("planner", (validate_planner, plan_projection, plan_scale_features, match_regimes)),
    ("GPU", (gpu_bundle, gpu_check, gpu_verdict, hf_tokenizer)),
    ("data", (extract,)),
    ("checks", (check_layers,)),
)
