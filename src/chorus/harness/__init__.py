"""Coverage harness: Verilator + cocotb simulation of candidate stimulus, sandboxed."""

from chorus.harness.build import ensure_build
from chorus.harness.coverage import read_coverage_dat
from chorus.harness.cocotb_run import SandboxResult
from chorus.harness.sandbox import SandboxLimits
from chorus.harness.score import prebuild, score, score_generations, score_many
from chorus.harness.verdict import STATUSES, BuildError, SimResult, dense_score

__all__ = [
    "STATUSES",
    "BuildError",
    "SandboxLimits",
    "SandboxResult",
    "SimResult",
    "dense_score",
    "ensure_build",
    "prebuild",
    "read_coverage_dat",
    "score",
    "score_generations",
    "score_many",
]
