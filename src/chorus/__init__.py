"""chorus-flow: the CHORUS recipe (staged SFT, coverage-reward RL experts, merging,
per-task Pass@1) as a Snakemake workflow."""

__version__ = "0.1.0"  # keep equal to pyproject.toml's version; releases are tagged v<version>
