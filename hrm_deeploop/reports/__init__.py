"""What the demo and the study report: their tables, expected ranges and statistics (`demo`,
`stats`, `study`) and their figures (`curves`: the demo's loss curves; the study's plot is in
`study`); matplotlib is imported only when a figure is drawn."""
