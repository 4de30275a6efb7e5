rule placement_tiers:
    """What memory this host has (NUMA nodes, GPUs) and which configured tiers are usable; with
    placement.on_missing: strict a missing tier stops the run here, before anything is measured."""
    output:
        "results/placement/tiers.json",
    params:
        settings=settings_of("placement_tiers"),
    log:
        "logs/placement_tiers.log",
    resources:
        measure=MEASURE_SHARED,
    conda:
        ENV
    script:
        "../../scripts/placement_tiers.py"
