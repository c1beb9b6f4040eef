"""chorus-flow: the CHORUS recipe (staged SFT, coverage-reward RL experts, merging,
per-task Pass@1) as a Snakemake workflow."""

import os

__version__ = "0.1.0"  # keep equal to pyproject.toml's version; releases are tagged v<version>

# transformers >= 5.25 fetches "hub kernels" by default, which fails offline (compute
# nodes) or without the kernels package. Every job script, CLI and test imports this
# package before transformers: one place turns them off unless the caller chose.
os.environ.setdefault("USE_HUB_KERNELS", "0")
