"""The command line's helpers: the solver benchmark, the demo matrices and the glossary."""
