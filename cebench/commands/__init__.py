"""The commands as library calls, side by side: `sweep`, `predict` (and `fit`), `explain`,
`verify`, `check`. Each checks its options, computes through the packages below it and
returns rows or answers; nothing here prints (the CLI renders)."""
