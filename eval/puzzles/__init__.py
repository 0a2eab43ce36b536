"""Sudoku's, Maze's and any other puzzle task's evaluation: per-segment scoring (scoring), test-time
augmentation groups (tta), metrics and pictures (report), the evaluate step (evaluate)."""
