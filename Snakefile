# Entry point. The workflow lives in workflow/Snakefile (one rules file per stage under workflow/rules/).
from snakemake.utils import min_version

min_version("9.0")


include: "workflow/Snakefile"


# The default target lives here: Snakemake 9 ignores `default_target` of a rule in an included file.
rule all:
    default_target: True
    input:
        "results/figures",
        "results/advise/advise.png",
