# servesweep: one target per benchmark point, results/<recipe>/c<conc>.json,
# rolled up into results/summary.md. All logic lives in scripts/servesweep.
import sys
from pathlib import Path

from snakemake.utils import min_version

min_version("9.0")

sys.path.insert(0, str(Path(workflow.basedir) / "scripts"))


report: "report/workflow.rst"


include: "rules/common.smk"
include: "rules/points.smk"
include: "rules/capacity.smk"
include: "rules/aggregate.smk"


onstart:
    SELECTION.start_running()  # the warm stacks' curve files: written once the DAG is final


rule all:
    default_target: True
    input:
        str(paths.SUMMARY_MD),
