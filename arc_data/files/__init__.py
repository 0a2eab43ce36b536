"""The rules for every writer in the toolkit, and its atomic writes (torch-free: the text pipeline, the
trainers, the checkpoints and eval import it too). One room per purpose:

    arc_data.files.names    what a path is: why_not_a_file / why_not_a_folder (in words), resolved,
                            regular_files, plain task names (check_task_name, file_stem), temp_name
    arc_data.files.atomic   single-file atomic writes (atomic_file, save_npy), fsync_tree, the
                            no-replace rename, os_error_line, stop_point (race tests), stale temps
    arc_data.files.guard    "may I write here": output folders and single output files checked
                            against the command's inputs, non-regular files, existing files, live
                            runs' locks (check_output_dir, checked_output_dir, check_output_file)
    arc_data.files.blocks   an .npy file written block after block by direct I/O (the ARC build's arrays)
    arc_data.files.publish  publishing a checked output: atomic_dir(s) (whole folders, all or none),
                            staged_outputs / publish_files (outputs dropped into an existing folder)
    arc_data.files.locks    RunLock (one run per folder) and the lock check the guard consults
    arc_data.files.jsonio   the one JSON reader for users' files (parse_json, read_json) and save_json

The rules:
- An output folder must not be, contain, or lie inside any of the command's inputs (a build with
  `output_dir` equal to its source folder would replace the raw tasks), and its parent must be a
  writable folder (found before an hour of work, not after).
- `overwrite=true` replaces only a folder the writer wrote itself (it holds the writer's marker
  file, e.g. manifest.json) or an empty one: never an arbitrary folder.
- A task name becomes a file name (viz PNGs, the vote report's pictures) only through `file_stem`,
  which refuses names that are not plain: path separators, `..`, a leading dot, control characters.
  The builders refuse such names at the source (`check_task_name`), so a dataset we built never
  holds one; a dataset built elsewhere is refused where a name would become a path.
- Only regular files are read as task files (`regular_files`): a FIFO named x.json would block.
- Publishing never replaces what it did not check: `checked_output_dir` records the folder it
  found (or that there was none), and `atomic_dir` publishes with a no-replace rename
  (renameat2 RENAME_NOREPLACE), replacing only that very folder; `publish_files` does the same for
  outputs a command drops into an existing folder (vote, evaluate).

    target = checked_output_dir(cfg.output_dir, cfg.overwrite, inputs, marker="manifest.json", writer="build-arc")
    with atomic_dir(target) as tmp:                            # write everything under tmp
        ...
    # tmp was fsynced and renamed to target.path; on any exception (Ctrl-C too) it was removed and
    # the output is untouched; an OSError (full disk, ...) became one line naming the path and errno;
    # atomic_dirs([a, b]) publishes several folders all or none

The temporary folder sits beside the output (`.<name>.tmp-<pid>`, a long name cut and hashed so it
fits 255 bytes), so the final rename stays on one filesystem. Temp folders of killed builds (whose
pid is gone) are removed on the next build.
"""
