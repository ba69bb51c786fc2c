"""The GPU bundle (`python3 -m occtools gpu-bundle`): cli.py packs it, libs.py gathers the shared
libraries and Open MPI it needs, manifest.py checks and describes it; env.sh and run.sh are the
two shell files it carries (the GPU machine sources them)."""
