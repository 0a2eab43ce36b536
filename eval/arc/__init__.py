"""ARC's evaluation: count-first vote over augmented copies (vote, decode, results), pass@K, the ARC
Prize submission (arcprize) and the report."""
