"""Procedural ARC task families of our own (`hrm-deeploop generate-arc`), numpy only.

    arc_data.generators.base      Family (params, sample, rule), grid helpers, GenerationError
    arc_data.generators.geometry  dihedral, colour_map, tile, scale_up, symmetry_complete, pattern_extend
    arc_data.generators.objects   gravity, move_objects, copy_objects, recolour_by_size, crop_largest, hollow
    arc_data.generators.fills     flood_fill, count_objects, majority_colour, draw_lines
    arc_data.generators.registry  FAMILIES, make_task (draw + check one task), check_task
    arc_data.generators.generate  GenerateArcConfig, generate(cfg)   (`hrm-deeploop generate-arc`)

Written from scratch; the families are ours (no code of RE-ARC, ARC-GEN or BARC).
"""
