"""What the grid-puzzle tasks (Sudoku, Maze, ...) share: the official CSV format, the build-puzzles
and generate-puzzles pipeline, their configs, and the registry of tasks it dispatches through.

    arc_data.puzzles.registry       TASKS: task name -> its hooks (arc_data/<task>/task.py)
    arc_data.puzzles.puzzle_config  BuildPuzzlesConfig, GeneratePuzzlesConfig
    arc_data.puzzles.csvfile        read_puzzle_csv, write_puzzle_csv (the official CSV format)
    arc_data.puzzles.kernels        the CSV reader's numba kernels (large files)
    arc_data.puzzles.build          build_puzzles / run_build, load_table   (`hrm-deeploop build-puzzles`)
    arc_data.puzzles.generate       generate_puzzles / run_generate         (`hrm-deeploop generate-puzzles`)
    arc_data.puzzles.viz            render_puzzle(task, ...) by task, save_png
"""
