"""ARC-AGI data: sources, validation, augmentation, dataset build, pictures. numpy + numba only (no torch).

Public API:
    arc_data.format      on-disk format constants and numpy references (dihedral, encode_grid, crop, ...)
    arc_data.sources     load_sources(specs, eval_name, require_outputs) -> (tasks, source infos)
    arc_data.build       BuildConfig, build(cfg)                     (`hrm-deeploop build-arc`)
    arc_data.dataset     open_split(dir, split) -> PuzzleSplit, load_identifiers, load_augmentations
    arc_data.viz         VizConfig, visualize(cfg)                   (`hrm-deeploop viz-arc`)
    arc_data.errors      ArcDataError
"""
