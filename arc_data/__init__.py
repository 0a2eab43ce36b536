"""Puzzle data: ARC-AGI, Sudoku and Maze sources, validation, augmentation, dataset build, pictures.
numpy + numba only (no torch).

Public API:
    arc_data.format         on-disk format constants and numpy references (dihedral, encode_grid, crop, ...)
    arc_data.arc.sources        load_sources(specs, eval_name, require_outputs) -> (tasks, source infos)
    arc_data.arc.build          BuildConfig, build(cfg)                          (`hrm-deeploop build-arc`)
    arc_data.dataset        open_split(dir, split) -> PuzzleSplit (any task, shapes from dataset.json),
                            task_kind(dir), load_identifiers, load_augmentations
    arc_data.arc.viz            VizConfig, visualize(cfg)                        (`hrm-deeploop viz-arc`)
    arc_data.puzzles.config  BuildPuzzlesConfig, GeneratePuzzlesConfig
    arc_data.puzzles        build_puzzles / run_build, generate_puzzles / run_generate
                            (`hrm-deeploop build-puzzles`, `generate-puzzles`), load_table, sudoku_augs
    arc_data.puzzles.csvfile     read_puzzle_csv, write_puzzle_csv (the official CSV format)
    arc_data.sudoku         solver, generator, answer check, SudokuAugs + apply_augs / invert_augs
    arc_data.maze           generator, BFS, answer check, dihedral rows + their inverse
    arc_data.puzzle_viz     render_sudoku, render_maze, render_puzzle, save_png
    arc_data.fsio           atomic dataset writes shared by the builders
    arc_data.errors         DatasetError
"""
