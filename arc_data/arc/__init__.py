"""ARC-AGI: sources (bundled ARC-AGI-1/2, ConceptARC, folders, Kaggle files), the augmentation plan,
numba kernels (transform + hash, encode), `build-arc`, `viz-arc`, held-out task splits.

    arc_data.arc.sources    load_sources(specs, eval_name, require_outputs) -> (tasks, source infos)
    arc_data.arc.generated  rearc: / arcgen: / barc: sources (the generators' dumps), grouped into tasks
    arc_data.arc.tasktable  a generated source's tasks as arrays (TaskTable), the build's TaskList
    arc_data.arc.spill      the temporary file a generated source's grids and plan arrays live in
    arc_data.arc.pairscan   numba scanner for clean RE-ARC / ARC-GEN pair-list files
    arc_data.arc.taskscan   numba scanner for clean task files (<subset>/<task>.json), on pairscan's grids
    arc_data.arc.plan       make_plan: augmentations drawn, deduplicated and laid out per split
    arc_data.arc.kernels    augment_tasks, puzzle_hashes, permuted_colours, example_sides (numba, serial)
    arc_data.arc.build      BuildConfig, build(cfg)          (`hrm-deeploop build-arc`)
    arc_data.arc.viz        VizConfig, visualize(cfg)        (`hrm-deeploop viz-arc`)
    arc_data.arc.tasksplit  held-out tasks (unseen-task evaluation)
    arc_data/arc/bundled/   ConceptARC, shipped
"""
