"""Datasets of grid puzzles (ARC-AGI, Sudoku, Maze, ...): one on-disk format and one room per task.
numpy + numba only (no torch), and nothing else of ours.

The format (these root modules own it; no task room is imported by them):
    arc_data.format     layout constants (file names, encoding), numpy references (dihedral,
                        encode_grid, crop); imported as `from arc_data import format as fmt`
    arc_data.dataset    the reader: open_split(dir, split) -> PuzzleSplit (any task, either
                        layout), DatasetMeta (split.meta: dataset.json, typed), task_kind,
                        load_identifiers, load_augmentations, load_npz, resolve_examples
    arc_data.compact    the compact layout's encoder (numba), shared by the reader and build-arc
    arc_data.files      the writing rules (one room per purpose): the path guard, atomic writes,
                        publishing, run locks, the JSON reader
    arc_data.progress   progress bars and the package version a manifest records
    arc_data.budget     memory and disk estimates checked before any work
    arc_data.grid_key   grid_key, row_keys: the one 128-bit key of a grid (every vote groups by it)
    arc_data.originals  ARC's augmentation table (AugTable) and each task's un-augmented test
                        examples, read row by row: what the ARC vote reads
    arc_data.errors     DatasetError (the base the CLI catches); ArcError, SudokuError, MazeError
                        (one per task: the class says where an error came from); raised_as

The task rooms (each imports the root, never another room):
    arc_data.arc        ARC-AGI: sources, plan, kernels, build (`build-arc`), viz (`viz-arc`),
                        tasksplit, bundled/ (ConceptARC)
    arc_data.sudoku     rules (solver, generator, checks, augmentations), kernels, viz, task
    arc_data.maze       rules (generator, BFS, checks, dihedral rows), kernels, viz, task
    arc_data.puzzles    what the grid puzzles share: the official CSV format (csvfile), config,
                        build (`build-puzzles`), generate (`generate-puzzles`), viz (render_puzzle),
                        and the registry (TASKS) through which alone it reaches sudoku/ and maze/

Adding a fourth grid-puzzle task (say `nonogram`): a folder arc_data/nonogram/ with the rules in
`__init__.py` (numpy; numba kernels in `kernels.py`, imported lazily), pictures in `viz.py`, and a
`task.py` whose object has the hooks of `arc_data.puzzles.registry.GridTask`, raising its own
`NonogramError(DatasetError)` from errors.py; then one line in `registry.TASKS` and the room in
pyproject.toml (packages, the two arc_data contracts). It reuses the CSV reader/writer, the
build-puzzles / generate-puzzles pipeline (checks, subsampling, augmentation groups, the HRM layout,
manifest, atomic writes) and the reader; nothing in the format root changes. docs/puzzles.md has
the details; a task that is not a square board of tokens gets a room like arc/ with its own builder
on the same format instead.
"""
